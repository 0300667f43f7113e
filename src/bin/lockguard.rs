//! The `lockguard` tool.
//!
//! - `lockguard check URL`: the deployment check of the store behind `URL`
//!   (see `lockguard::check`). Prints one line per finding; the exit status
//!   is 0 when nothing fails, 1 on a FAIL, 2 when the check could not run.
//! - `lockguard locks URL [PATTERN] [--prefix P]`: every lock held or
//!   awaited on the store, with its holders and waiters in order (see
//!   `Client::locks`). Exit status 0, or 2 when it could not be read.
//! - `lockguard release URL KEY --force [--kind K] [--prefix P] [--yes]`:
//!   frees a lock whoever holds it (see `Client::force_release`), after a
//!   confirmation unless `--yes`. Exit status 0 when freed (or free
//!   already), 1 when not confirmed, 2 on an error.
//! - `lockguard chaos --target URL [...]`: the history checker
//!   (`lockguard-chaos`) against the store behind `URL`, with client-side
//!   faults only (feature `chaos`, in `full`). The exit status is 0 when
//!   every check passed, 1 otherwise, 2 for bad usage.

use std::process::ExitCode;

const USAGE: &str = "usage: lockguard check URL
       lockguard locks URL [PATTERN] [--prefix P]
       lockguard release URL KEY --force [--kind K] [--prefix P] [--yes]
       lockguard chaos --target URL [--seed N] [--profile ci|long] [--self-test] [--out DIR]

check  Connects to the store at URL (redis://, redis+redlock://,
       redis+cluster://, redis+sentinel://, postgres://, mysql:// or
       mariadb://, zookeeper://, etcd://) and says, line by line, whether
       this deployment provides what a lock's guarantees depend on (OK, WARN
       or FAIL, with the guarantee it affects). Exit status: 0 when nothing
       fails, 1 on a FAIL, 2 when the check could not run.
locks  Lists every lock, semaphore, read-write lock, election and
       scheduled job held or awaited on the store at URL whose name matches
       PATTERN (`*` any run, `?` one character; default `*`): each holder's
       token, fencing token and lease left, and the waiters in order.
       --prefix P reads the locks of clients built with that key prefix
       (default lockguard:).
release
       Frees the lock KEY whoever holds it, for a holder that is stuck:
       its hold ends, the next waiter takes the lock with a greater fencing
       token, and the old holder learns it lost the lock at its next
       renewal (a fenced write of its is refused once a later holder has
       written). --force is required; asks for confirmation unless --yes.
       --kind lock|rw|urw|urw-gate|leader|schedule (default lock) says
       what KEY names.
chaos  Runs the history checker against the store at URL: worker processes
       take locks, permits, counters and limits on it while some are paused
       and killed (the server is never touched), and what they recorded is
       checked (no two holders, fences that only grow, no lost update, ...).
       Writes report.html beside the histories. Exit status: 0 when every
       check passed, 1 otherwise, 2 for bad usage. Use a database or key
       prefix of its own: the workers write keys there.

`cargo install lockguard --features full` builds the tool with every store
and the chaos command.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("check") if args.len() == 2 => check(&args[1]),
        Some("locks") => locks(&args[1..]),
        Some("release") => release(&args[1..]),
        Some("chaos") => chaos(args[1..].to_vec()),
        Some("-h" | "--help") if args.len() == 1 => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// A runtime for one command; `None` (said) when none can start.
fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("error: cannot start a runtime: {e}");
            None
        }
    }
}

fn check(url: &str) -> ExitCode {
    let Some(rt) = runtime() else {
        return ExitCode::from(2);
    };
    match rt.block_on(lockguard::check::deployment(url)) {
        Ok(report) => {
            println!("{report}");
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// A command's arguments: its words in order, and its options.
#[derive(Debug, Default)]
struct Args {
    words: Vec<String>,
    prefix: Option<String>,
    kind: Option<String>,
    force: bool,
    yes: bool,
}

impl Args {
    /// Reads `args`; an unknown option or one without its value is an
    /// error naming it.
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut out = Self::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match a.as_str() {
                "--prefix" => out.prefix = Some(value("--prefix")?),
                "--kind" => out.kind = Some(value("--kind")?),
                "--force" => out.force = true,
                "--yes" | "-y" => out.yes = true,
                o if o.starts_with('-') && o.len() > 1 => {
                    return Err(format!("unknown option {o}"));
                }
                w => out.words.push(w.to_owned()),
            }
        }
        Ok(out)
    }

    /// A client of the store at `url`, with the prefix asked for.
    async fn connect(&self, url: &str) -> lockguard::Result<lockguard::Client> {
        use lockguard::BuilderExt as _;
        let mut builder = lockguard::Client::builder();
        if let Some(p) = &self.prefix {
            builder = builder.prefix(p.as_str());
        }
        builder.connect(url).await
    }
}

/// A usage error: the message, then the usage.
fn usage_error(message: &str) -> ExitCode {
    let lines = USAGE.split("\n\n").next().unwrap_or(USAGE);
    eprintln!("error: {message}\n\n{lines}\n\n`lockguard --help` says more");
    ExitCode::from(2)
}

/// `lockguard locks URL [PATTERN]`.
fn locks(args: &[String]) -> ExitCode {
    let args = match Args::parse(args) {
        Ok(a) if a.kind.is_none() && !a.force && !a.yes => a,
        Ok(_) => return usage_error("locks takes --prefix only"),
        Err(e) => return usage_error(&e),
    };
    let (url, pattern) = match args.words.as_slice() {
        [url] => (url, "*"),
        [url, pattern] => (url, pattern.as_str()),
        _ => return usage_error("locks takes a URL and at most one pattern"),
    };
    let Some(rt) = runtime() else {
        return ExitCode::from(2);
    };
    let listed: lockguard::Result<_> = rt.block_on(async {
        let lg = args.connect(url).await?;
        let found = lg.locks(pattern).await?;
        let crash_wait = lg.crash_wait().await?;
        Ok((lg, found, crash_wait))
    });
    match listed {
        Ok((lg, found, crash_wait)) => {
            if let Some(left) = crash_wait {
                print!("{}", crash_wait_text(&lg, left));
            }
            print!("{}", locks_text(&lg, pattern, &found));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// `lockguard release URL KEY --force`.
fn release(args: &[String]) -> ExitCode {
    let args = match Args::parse(args) {
        Ok(a) => a,
        Err(e) => return usage_error(&e),
    };
    let [url, key] = args.words.as_slice() else {
        return usage_error("release takes a URL and one KEY");
    };
    if !args.force {
        return usage_error(
            "release needs --force: it ends a hold that another process may still believe it has",
        );
    }
    let kind = match args.kind.as_deref().map(lockguard::LockKind::parse) {
        None => lockguard::LockKind::Lock,
        Some(Some(k)) => k,
        Some(None) => {
            return usage_error("--kind is one of lock, rw, urw, urw-gate, leader, schedule");
        }
    };
    let Some(rt) = runtime() else {
        return ExitCode::from(2);
    };
    let done: lockguard::Result<bool> = rt.block_on(async {
        let lg = args.connect(url).await?;
        // Every lock, then the one named: a name may hold `*` or `?`.
        let held = lg.locks("*").await?;
        let Some(state) = held.into_iter().find(|s| s.kind == kind && s.name == *key) else {
            println!("{kind} {key:?} is free: nothing to release");
            return Ok(true);
        };
        if state.holders.is_empty() {
            println!("{kind} {key:?} is held by nobody now (its waiters take it in turn)");
            return Ok(true);
        }
        print!("{}", state_text(&state));
        if !args.yes && !confirmed(kind, key) {
            eprintln!("not released: not confirmed (pass --yes to skip the question)");
            return Ok(false);
        }
        let forced = lg.force_release(kind, key).await?;
        print!("{}", forced_text(kind, key, &forced));
        Ok(true)
    });
    match done {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Asks on the terminal whether to free the lock; anything but `y` or
/// `yes` (an end of input too) is a no.
fn confirmed(kind: lockguard::LockKind, key: &str) -> bool {
    use std::io::Write as _;
    eprint!("free {kind} {key:?}? its holder may still be running [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// What `lockguard locks` says first while the store waits out the leases
/// a crash or a restart lost.
fn crash_wait_text(lg: &lockguard::Client, left: std::time::Duration) -> String {
    let at = lg.store_address().unwrap_or(lg.store_name());
    format!(
        "no lock is taken anew on {at} for {:.1}s more: the wait after a crash or a restart, \
         which lost the records of the leases running then (the longest lease any lock took)\n\n",
        left.as_secs_f64()
    )
}

/// What `lockguard locks` prints.
fn locks_text(lg: &lockguard::Client, pattern: &str, found: &[lockguard::LockState]) -> String {
    let at = lg.store_address().unwrap_or(lg.store_name());
    if found.is_empty() {
        return format!(
            "nothing held or awaited on {at} under prefix {:?} matching {pattern:?}\n",
            lg.prefix()
        );
    }
    let mut out = format!(
        "{} held or awaited on {at} under prefix {:?} matching {pattern:?}\n\n",
        found.len(),
        lg.prefix()
    );
    for state in found {
        out.push_str(&state_text(state));
    }
    out
}

/// One lock: a line of its own, then its holders and waiters indented.
fn state_text(state: &lockguard::LockState) -> String {
    let mut out = format!("{} {:?}", state.kind, state.name);
    if let Some(f) = state.latest_fence {
        out.push_str(&format!("  (latest fencing token {f})"));
    }
    out.push('\n');
    for h in &state.holders {
        out.push_str(&format!("  holder  {}", h.token.as_str()));
        if let Some(m) = h.mode {
            out.push_str(&format!("  {}", m.as_str()));
        }
        if let Some(f) = h.fence {
            out.push_str(&format!("  fencing token {f}"));
        }
        match h.lease_left {
            Some(left) => out.push_str(&format!("  lease {:.1}s left", left.as_secs_f64())),
            None => out.push_str("  lease kept by its client"),
        }
        out.push('\n');
    }
    for (i, w) in state.waiters.iter().enumerate() {
        out.push_str(&format!("  waiter {}  {}", i + 1, w.token.as_str()));
        if let Some(m) = w.mode {
            out.push_str(&format!("  {}", m.as_str()));
        }
        out.push('\n');
    }
    out
}

/// What `lockguard release` prints once it freed the lock.
fn forced_text(kind: lockguard::LockKind, key: &str, forced: &lockguard::Forced) -> String {
    let mut out = String::new();
    if forced.evicted.is_empty() {
        out.push_str(&format!(
            "{kind} {key:?} was freed meanwhile: nothing evicted\n"
        ));
    }
    for h in &forced.evicted {
        out.push_str(&format!(
            "released: holder {} no longer holds {kind} {key:?}\n",
            h.token.as_str()
        ));
    }
    for h in &forced.holders {
        out.push_str(&format!("now held by {}\n", h.token.as_str()));
    }
    if let Some(f) = forced.latest_fence {
        out.push_str(&format!(
            "latest fencing token {f}: every later holder's is greater, so a fenced write of the \
             old holder is refused once a later holder has written\n"
        ));
    }
    out
}

/// `lockguard chaos ...`: the checker with the arguments after `chaos`
/// (a worker it starts comes back here as `lockguard chaos worker ...`).
/// Only against a store of the user's (`--target`): the harnesses that
/// start lockguard's own test servers are `lockguard-chaos`'s.
#[cfg(feature = "chaos")]
fn chaos(args: Vec<String>) -> ExitCode {
    let worker = args.first().map(String::as_str) == Some("worker");
    if !worker && !args.iter().any(|a| a == "--target") && !args.iter().any(|a| a == "--help") {
        eprintln!(
            "error: lockguard chaos needs --target URL: the store to run against (the \
             `lockguard-chaos` binary of a checkout starts its own test servers)\n\n{USAGE}"
        );
        return ExitCode::from(2);
    }
    lockguard_chaos::command(&lockguard_chaos::stores::ALL, args, &["chaos"])
}

#[cfg(not(feature = "chaos"))]
fn chaos(_args: Vec<String>) -> ExitCode {
    eprintln!(
        "error: this lockguard was built without the chaos command; \
         `cargo install lockguard --features full` builds it with every store and the command"
    );
    ExitCode::from(2)
}
