use lockguard::{concurrency_limit, distributed_lock, rate_limit};

#[distributed_lock(key = "order:{ordr_id}")]
async fn misspelled(order_id: u64) -> Result<(), lockguard::Error> {
    let _ = order_id;
    Ok(())
}

#[rate_limit(key = "tenant:{self.tenant}", rate = "1/s")]
async fn self_in_a_free_fn(tenant: &str) -> Result<(), lockguard::Error> {
    let _ = tenant;
    Ok(())
}

#[concurrency_limit(key = "exports:{tenant", permits = 2)]
async fn unclosed(tenant: &str) -> Result<(), lockguard::Error> {
    let _ = tenant;
    Ok(())
}

#[distributed_lock(key = "order:{id:?}")]
async fn format_spec(id: u64) -> Result<(), lockguard::Error> {
    let _ = id;
    Ok(())
}

fn main() {}
