use lockguard::rate_limit;

#[rate_limit(key = "a", rate = "10/sec")]
async fn unknown_unit() -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "a", rate = "10")]
async fn no_period() -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "a", rate = "0/s")]
async fn zero() -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "a", rate = "5000/ms")]
async fn too_fine() -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "a", rate = "10/s", algorithm = "leaky_bucket")]
async fn unknown_algorithm() -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "a", rate = "10/s", algorithm = "fixed_window", burst = 20)]
async fn burst_without_gcra() -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "a", rate = "10/s", cost = 11)]
async fn cost_over_limit() -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "a", rate = "1/366d", burst = 1_000_000)]
async fn tolerance_beyond_tracking() -> Result<(), lockguard::Error> {
    Ok(())
}

fn main() {}
