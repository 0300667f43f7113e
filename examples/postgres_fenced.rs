//! Locks on PostgreSQL, and a fenced write to the application's own table:
//! a worker that stalls past its lease cannot overwrite the work of the
//! worker that took over.
//!
//! ```sh
//! DATABASE_URL=postgres://user@localhost/db cargo run --example postgres_fenced
//! ```
//!
//! It creates (if missing) lockguard's schema and a table `example_orders`,
//! then exits non-zero if a stale write got through.

use std::time::Duration;

use lockguard_core::{Client, Error};
use lockguard_postgres::ClientExt as _;
use lockguard_postgres::{FencedTable, tokio_postgres};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!("set DATABASE_URL to a PostgreSQL database, e.g. postgres://user@localhost/db");
        std::process::exit(2);
    };
    // The application's own connection and table, with a token column.
    let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS example_orders (id bigint PRIMARY KEY, status text NOT NULL);
         INSERT INTO example_orders VALUES (1, 'new')
           ON CONFLICT (id) DO UPDATE SET status = 'new';",
    )
    .await?;
    let orders = FencedTable::new("example_orders", "id")?;
    db.batch_execute(&orders.add_column_sql()).await?;

    // Two workers, as two processes would be: each its own client.
    let a = Client::connect_postgres(&url).await?;
    let b = Client::connect_postgres(&url).await?;
    let order = format!("example-order:{}", std::process::id());

    // Worker A takes the order with a short lease, then stalls (a GC
    // pause, a slow call) past it.
    let lease = Duration::from_millis(300);
    let stalled = a.lock(&order).lease(lease).acquire().await?;
    println!("A holds the order with token {}", stalled.fencing_token());
    tokio::time::sleep(lease + Duration::from_millis(200)).await;

    // Worker B finds the lease over, takes the order and pays it.
    let current = b
        .lock(&order)
        .wait(Duration::from_secs(5))
        .acquire()
        .await?;
    println!("B holds the order with token {}", current.fencing_token());
    orders
        .update(&db, &1i64, current.fencing_token(), &[("status", &"paid")])
        .await?;
    println!("B wrote status = paid");

    // A wakes up and writes with its old token: refused, in the database.
    match orders
        .update(
            &db,
            &1i64,
            stalled.fencing_token(),
            &[("status", &"cancelled")],
        )
        .await
    {
        Err(e) if e.is_stale_fencing_token() => println!("A's late write was refused: {e}"),
        Ok(_) => return Err("A's stale write got through".into()),
        Err(e) => return Err(e.into()),
    }
    println!("A still holds the lock: {}", stalled.is_held());
    current.release().await?;

    let status: String = db
        .query_one("SELECT status FROM example_orders WHERE id = 1", &[])
        .await?
        .get(0);
    println!("order 1 is {status}");
    if status != "paid" {
        return Err(Error::new(
            lockguard_core::ErrorKind::Protocol,
            "the order was overwritten",
        )
        .into());
    }
    Ok(())
}
