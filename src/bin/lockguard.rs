//! `lockguard check URL`: the deployment check of the store behind `URL`
//! (see `lockguard::check`). Prints one line per finding; the exit status
//! is 0 when nothing fails, 1 on a FAIL, 2 when the check could not run.

use std::process::ExitCode;

const USAGE: &str = "usage: lockguard check URL

Connects to the store at URL (redis://, redis+redlock://, redis+cluster://,
redis+sentinel://, postgres://, mysql:// or mariadb://, zookeeper://) and
says, line by line, whether this deployment provides what a lock's
guarantees depend on (OK, WARN or FAIL, with the guarantee it affects).
Exit status: 0 when nothing fails, 1 on a FAIL, 2 when the check could not run.
`cargo install lockguard --features full` builds the tool with every store.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = match args.as_slice() {
        [cmd, url] if cmd == "check" => url.clone(),
        [flag] if flag == "-h" || flag == "--help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(lockguard::check::deployment(&url)) {
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
