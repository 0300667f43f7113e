use lockguard::distributed_lock;

struct Service {
    name: String,
}

impl Service {
    #[distributed_lock(key = "job", client = self.name)]
    async fn run(&self) -> Result<(), lockguard::Error> {
        Ok(())
    }
}

#[distributed_lock(key = "job", crate = "no such path")]
async fn bad_crate() -> Result<(), lockguard::Error> {
    Ok(())
}

fn main() {}
