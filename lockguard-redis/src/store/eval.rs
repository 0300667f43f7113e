//! One call of a script: its `EVALSHA` written straight into one command.
//!
//! redis-rs's `ScriptInvocation` keeps each key and each argument in a
//! buffer of its own and copies them into the command when it is sent: six
//! to ten allocations per call that this type does not make. It sends
//! `EVALSHA` first, as `ScriptInvocation` does. When the server answers
//! `NOSCRIPT` (its script cache flushed, or a new server behind the same
//! address), it sends the script itself with `EVAL`, which also caches it
//! there, as go-redis's `Script.Run` does. `ScriptInvocation` sends
//! `SCRIPT LOAD` and the `EVALSHA` again instead: a round trip more, and on
//! a cluster redis-rs sends `SCRIPT LOAD` to every master and waits for
//! all of them, so one master down or paused failed the first call of a
//! script on the keys of every other master.
//!
//! From Redis 7.4, a script cached by `EVAL` (unlike one loaded with
//! `SCRIPT LOAD`) may be evicted, the least recently used first, once more
//! than 500 such scripts are cached. lockguard's scripts are a few dozen
//! and in use, so only an application that sends hundreds of distinct
//! scripts between two of lockguard's calls would push one out; its next
//! call then costs the `NOSCRIPT` round trip and an `EVAL` again, nothing
//! more.

use std::io::Write as _;

use redis::{Arg, Cmd, FromRedisValue, RedisResult, RedisWrite as _, Script, ToRedisArgs};

/// A Lua script: its code, and its SHA-1 hash for `EVALSHA`.
pub(crate) struct Lua {
    script: Script,
    code: &'static str,
}

impl Lua {
    /// The script `code` (hashed once, here).
    pub(crate) fn new(code: &'static str) -> Self {
        Self {
            script: Script::new(code),
            code,
        }
    }

    /// The script's SHA-1 hash, in hex.
    pub(crate) fn hash(&self) -> &str {
        self.script.get_hash()
    }
}

/// An `EVALSHA` of `script`, its keys written first, then its arguments.
pub(crate) struct Eval<'s> {
    script: &'s Lua,
    cmd: Cmd,
    /// Keys announced and not yet written.
    keys_left: usize,
}

impl<'s> Eval<'s> {
    /// A call of `script` with `keys` keys, which [`key`](Self::key) must
    /// write before any argument. (Debug builds assert it; in a release
    /// build, a count that does not match makes the server refuse the call,
    /// an error.)
    pub(crate) fn new(script: &'s Lua, keys: usize) -> Self {
        // A lock's four keys, a token and a few numbers fit in 256 bytes
        // with the hash: the buffer is not grown while the call is written.
        let mut cmd = Cmd::with_capacity(3 + keys + 4, 256);
        cmd.arg("EVALSHA").arg(script.hash()).arg(keys);
        Self {
            script,
            cmd,
            keys_left: keys,
        }
    }

    /// Writes the next key.
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        debug_assert!(self.keys_left > 0, "more keys than announced");
        self.keys_left = self.keys_left.saturating_sub(1);
        self.cmd.arg(key);
        self
    }

    /// Writes the next key, made of `parts` joined, straight into the
    /// command.
    pub(crate) fn key_parts(&mut self, parts: &[&str]) -> &mut Self {
        debug_assert!(self.keys_left > 0, "more keys than announced");
        self.keys_left = self.keys_left.saturating_sub(1);
        {
            // The argument ends where this writer is dropped.
            let mut arg = self.cmd.writer_for_next_arg();
            for part in parts {
                // Writing to the command's buffer cannot fail.
                let _ = arg.write_all(part.as_bytes());
            }
        }
        self
    }

    /// Writes the next argument, after every key.
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        debug_assert_eq!(self.keys_left, 0, "an argument before every key");
        self.cmd.arg(arg);
        self
    }

    /// Sends the call; on `NOSCRIPT`, sends it again as an `EVAL` of the
    /// script's code (on a cluster, to the keys' node alone).
    pub(crate) async fn invoke<T, C>(&self, conn: &mut C) -> RedisResult<T>
    where
        T: FromRedisValue,
        C: redis::aio::ConnectionLike,
    {
        debug_assert_eq!(self.keys_left, 0, "fewer keys than announced");
        match self.cmd.query_async(conn).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.with_code().query_async(conn).await
            }
            answer => answer,
        }
    }

    /// Sends the call and `then` together, in one write on one connection
    /// (a pipeline), and reads both answers: the call's, and `then`'s as
    /// the server gave it (an error reply included). On `NOSCRIPT`, sends
    /// both again with the script's code.
    ///
    /// For a `WAIT` after a write: sent on its own it would go to whatever
    /// connection the connection manager holds by then (a new one after a
    /// reconnect, or a new master's after a Sentinel failover), where it
    /// counts that connection's writes, not the script's. In one pipeline,
    /// a connection lost between the two fails the whole request.
    pub(crate) async fn invoke_then<T, C>(
        &self,
        conn: &mut C,
        then: &Cmd,
    ) -> RedisResult<(T, redis::Value)>
    where
        T: FromRedisValue,
        C: redis::aio::ConnectionLike,
    {
        debug_assert_eq!(self.keys_left, 0, "fewer keys than announced");
        let (reply, after) = Self::pipelined(conn, self.cmd.clone(), then).await?;
        let reply = match reply.extract_error() {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                let (reply, after) = Self::pipelined(conn, self.with_code(), then).await?;
                return Ok((redis::from_redis_value(reply.extract_error()?)?, after));
            }
            reply => reply?,
        };
        Ok((redis::from_redis_value(reply)?, after))
    }

    /// `first` and `then` in one pipeline: their two replies.
    async fn pipelined<C: redis::aio::ConnectionLike>(
        conn: &mut C,
        first: Cmd,
        then: &Cmd,
    ) -> RedisResult<(redis::Value, redis::Value)> {
        let mut pipe = redis::Pipeline::with_capacity(2);
        pipe.add_command(first).add_command(then.clone());
        let mut replies = conn.req_packed_commands(&pipe, 0, 2).await?.into_iter();
        match (replies.next(), replies.next()) {
            (Some(reply), Some(after)) => Ok((reply, after)),
            _ => Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "a pipeline of two commands answered with fewer replies",
            ))),
        }
    }

    /// The same call as an `EVAL`: the script's code in place of its hash.
    fn with_code(&self) -> Cmd {
        let mut eval = Cmd::with_capacity(self.cmd.args_iter().len(), self.script.code.len() + 128);
        eval.arg("EVAL").arg(self.script.code);
        for arg in self.cmd.args_iter().skip(2) {
            if let Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
    }
}

impl std::fmt::Debug for Eval<'_> {
    /// The script's hash alone: keys and arguments may carry secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eval")
            .field("script", &self.script.hash())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::{Eval, Lua};

    /// The command is the one redis-rs's `ScriptInvocation` sends: the
    /// hash, the number of keys, the keys, then the arguments.
    #[test]
    fn the_command_is_evalsha_with_keys_then_arguments() {
        let script = Lua::new("return {KEYS[1], KEYS[2], ARGV[1], ARGV[2]}");
        let mut call = Eval::new(&script, 2);
        call.key("a").key("b{x}").arg("tok").arg(30_000u64);
        let expected = format!(
            "*7\r\n$7\r\nEVALSHA\r\n$40\r\n{}\r\n$1\r\n2\r\n$1\r\na\r\n$4\r\nb{{x}}\r\n$3\r\ntok\r\n$5\r\n30000\r\n",
            script.hash()
        );
        assert_eq!(
            String::from_utf8(call.cmd.get_packed_command()).unwrap(),
            expected
        );
    }

    /// The `EVAL` sent after `NOSCRIPT` is the same call with the code in
    /// place of the hash.
    #[test]
    fn the_fallback_is_eval_of_the_code_with_the_same_keys_and_arguments() {
        let code = "return {KEYS[1], ARGV[1]}";
        let script = Lua::new(code);
        let mut call = Eval::new(&script, 1);
        call.key("a").arg("tok");
        let expected = format!(
            "*5\r\n$4\r\nEVAL\r\n${}\r\n{code}\r\n$1\r\n1\r\n$1\r\na\r\n$3\r\ntok\r\n",
            code.len()
        );
        assert_eq!(
            String::from_utf8(call.with_code().get_packed_command()).unwrap(),
            expected
        );
    }
}
