use lockguard::{concurrency_limit, distributed_lock, rate_limit};

#[distributed_lock(key = "job", tll = "30s")]
async fn misspelled() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "job", permits = 3)]
async fn option_of_another_attribute() -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "k", rate = "1/s", wait = "1s")]
async fn rate_limits_do_not_wait() -> Result<(), lockguard::Error> {
    Ok(())
}

#[concurrency_limit(key = "k", permits = 2, "oops")]
async fn not_an_option() -> Result<(), lockguard::Error> {
    Ok(())
}

#[concurrency_limit(key = "k", permits = 2, at_least = "1s")]
async fn at_least_on_permits() -> Result<(), lockguard::Error> {
    Ok(())
}

fn main() {}
