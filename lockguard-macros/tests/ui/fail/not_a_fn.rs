use lockguard::rate_limit;

#[rate_limit(key = "k", rate = "1/s")]
struct NotAFunction;

trait Job {
    #[lockguard::distributed_lock(key = "job")]
    async fn declared_without_body(&self) -> Result<(), lockguard::Error>;
}

fn main() {}
