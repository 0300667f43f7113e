use lockguard::{scheduled, JobRun};

#[scheduled(evry = "1h")]
async fn misspelled() -> Result<(), lockguard::Error> {
    Ok(())
}

#[scheduled(at_most = "1m")]
async fn no_period() -> Result<(), lockguard::Error> {
    Ok(())
}

#[scheduled(every = "1m", at_least = "1m")]
async fn kept_a_whole_period() -> Result<(), lockguard::Error> {
    Ok(())
}

#[scheduled(every = "1m", key = "job")]
async fn a_key_is_no_option() -> Result<(), lockguard::Error> {
    Ok(())
}

#[scheduled(every = "1m")]
async fn returns_no_result(_run: JobRun) -> u32 {
    1
}

#[scheduled(every = "1m")]
fn not_async() -> Result<(), lockguard::Error> {
    Ok(())
}

struct Jobs;

impl Jobs {
    #[scheduled(every = "1m")]
    async fn a_method(&self) -> Result<(), lockguard::Error> {
        Ok(())
    }
}

fn main() {}
