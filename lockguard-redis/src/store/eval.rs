//! One call of a script: its `EVALSHA` written straight into one command.
//!
//! redis-rs's `ScriptInvocation` keeps each key and each argument in a
//! buffer of its own and copies them into the command when it is sent: six
//! to ten allocations per call that this type does not make. It keeps what
//! `ScriptInvocation` does on the wire: `EVALSHA` first, and when the server
//! answers `NOSCRIPT` (its script cache flushed, or a new server behind the
//! same address), `SCRIPT LOAD` and the `EVALSHA` once more.

use redis::{Cmd, FromRedisValue, RedisResult, Script, ToRedisArgs};

/// An `EVALSHA` of `script`, its keys written first, then its arguments.
pub(crate) struct Eval<'s> {
    script: &'s Script,
    cmd: Cmd,
    /// Keys announced and not yet written.
    keys_left: usize,
}

impl<'s> Eval<'s> {
    /// A call of `script` with `keys` keys, which [`key`](Self::key) must
    /// write before any argument. (Debug builds assert it; in a release
    /// build, a count that does not match makes the server refuse the call,
    /// an error.)
    pub(crate) fn new(script: &'s Script, keys: usize) -> Self {
        let mut cmd = Cmd::with_capacity(3 + keys + 4, 128);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
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

    /// Writes the next argument, after every key.
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        debug_assert_eq!(self.keys_left, 0, "an argument before every key");
        self.cmd.arg(arg);
        self
    }

    /// Sends the call; on `NOSCRIPT`, loads the script and sends it again.
    pub(crate) async fn invoke<T, C>(&self, conn: &mut C) -> RedisResult<T>
    where
        T: FromRedisValue,
        C: redis::aio::ConnectionLike,
    {
        debug_assert_eq!(self.keys_left, 0, "fewer keys than announced");
        match self.cmd.query_async(conn).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                self.cmd.query_async(conn).await
            }
            answer => answer,
        }
    }
}

impl std::fmt::Debug for Eval<'_> {
    /// The script's hash alone: keys and arguments may carry secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eval")
            .field("script", &self.script.get_hash())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::Eval;
    use redis::Script;

    /// The command is the one redis-rs's `ScriptInvocation` sends: the
    /// hash, the number of keys, the keys, then the arguments.
    #[test]
    fn the_command_is_evalsha_with_keys_then_arguments() {
        let script = Script::new("return {KEYS[1], KEYS[2], ARGV[1], ARGV[2]}");
        let mut call = Eval::new(&script, 2);
        call.key("a").key("b{x}").arg("tok").arg(30_000u64);
        let expected = format!(
            "*7\r\n$7\r\nEVALSHA\r\n$40\r\n{}\r\n$1\r\n2\r\n$1\r\na\r\n$4\r\nb{{x}}\r\n$3\r\ntok\r\n$5\r\n30000\r\n",
            script.get_hash()
        );
        assert_eq!(
            String::from_utf8(call.cmd.get_packed_command()).unwrap(),
            expected
        );
    }
}
