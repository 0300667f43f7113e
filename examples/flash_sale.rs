//! A flash sale over real HTTP: 100 hoodies, a crowd of shoppers, two bots
//! and a few double clicks, on the in-memory store or on any store's URL.
//!
//! ```sh
//! cargo run --example flash_sale                                       # drives itself, prints a summary, exits
//! LOCKGUARD_URL=redis://127.0.0.1:6379 cargo run --example flash_sale  # the same on Redis
//! LOCKGUARD_URL=postgres://user@host/db cargo run --features postgres --example flash_sale
//! cargo run --example flash_sale -- --serve                            # then keeps serving
//! ```
//!
//! The shop is an axum service:
//!
//! - `POST /buy/{sku}` is rate limited per client address (behind a trusted
//!   proxy) and per user, takes one item with the atomic bounded decrement
//!   (never oversold), lets each user buy once, and creates an order;
//! - `POST /orders/{id}/pay` runs under a lock per order, which puts double
//!   clicks in a row (each waits up to five seconds for the one before).
//!   The lock alone would let each click charge in turn: what stops a
//!   second charge is the order's status, a fenced value read under the
//!   lock. The handler gets the lock's lease from the layer, answers
//!   `already paid` when the status says so, and otherwise marks the order
//!   `charging` with the lease's fencing token before it charges (a click
//!   whose lease ran out is refused there, before charging) and `paid`
//!   after; a click still waiting when the wait runs out gets the shop's
//!   own JSON refusal;
//! - `GET /stock/{sku}` reads the stock.
//!
//! Run without arguments, it serves on a free loopback port, sends a burst
//! of concurrent requests to itself over HTTP (every buyer pays twice at
//! once, and one order gets eight payments at once), prints what happened
//! and checks its own numbers, among them one charge per order, counted in
//! the store (exit status 1 if any is wrong).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Extension, Path, Request, State};
use axum::http::{self, HeaderName, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lockguard::{BuilderExt as _, Client, Error, LeaseWatch, Quota};
use lockguard_tower::key::{ClientIp, Header, TrustedProxies};
use lockguard_tower::{LockLayer, MissingKey, RateLimitLayer, Refusal};

/// What is on sale.
const SKU: &str = "hoodie";
const INITIAL_STOCK: i64 = 100;
/// How long the payment provider takes to charge a card.
const CHARGE_TIME: Duration = Duration::from_millis(25);
/// How long a payment waits for the order's lock.
const PAY_WAIT: Duration = Duration::from_secs(5);
/// How many payments of one order arrive at once (the other orders get a
/// double click: two).
const SAME_ORDER_CLICKS: usize = 8;

const USER_ID: HeaderName = HeaderName::from_static("x-user-id");

// ---------------------------------------------------------------- the shop

#[derive(Clone)]
struct Shop {
    lg: Client,
}

impl Shop {
    fn stock(&self, sku: &str) -> lockguard::Counter {
        self.lg.counter(&format!("stock:{sku}"))
    }

    /// Whether an order exists: 1 once it was created, 0 otherwise.
    fn order(&self, id: i64) -> lockguard::Counter {
        self.lg.counter(&format!("order:{id}"))
    }

    /// An order's payment status: none, `charging` or `paid`, each written
    /// with the fencing token of the payment's lock.
    fn status(&self, id: i64) -> lockguard::FencedResource {
        self.lg.fenced(&format!("order:{id}:status"))
    }

    /// How many times the payment provider charged for order `id`.
    fn charges(&self, id: i64) -> lockguard::Counter {
        self.lg.counter(&format!("charges:order:{id}"))
    }
}

/// A JSON response.
fn json(status: StatusCode, body: String) -> Response {
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn store_error(e: &Error) -> Response {
    tracing::warn!(error = %e, "store error");
    json(
        StatusCode::SERVICE_UNAVAILABLE,
        r#"{"error":"store unavailable"}"#.into(),
    )
}

async fn buy(State(shop): State<Shop>, Path(sku): Path<String>, req: Request) -> Response {
    if sku != SKU {
        return json(StatusCode::NOT_FOUND, r#"{"error":"no such item"}"#.into());
    }
    // The per-user rate limit has already refused requests without a user.
    let user = match req.headers().get(&USER_ID).and_then(|v| v.to_str().ok()) {
        Some(user) => user.to_owned(),
        None => {
            return json(
                StatusCode::UNAUTHORIZED,
                r#"{"error":"who are you?"}"#.into(),
            );
        }
    };
    // One atomic step: take one if at least one is left. Never below zero,
    // whatever the number of servers and buyers.
    match shop.stock(&sku).decr_if_at_least(1).await {
        Ok(Some(_left)) => {}
        Ok(None) => return json(StatusCode::CONFLICT, r#"{"error":"sold out"}"#.into()),
        Err(e) => return store_error(&e),
    }
    // Once per user: a second purchase gives the item back.
    match shop
        .lg
        .counter(&format!("buyers:{sku}"))
        .mark_once(&user)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            if let Err(e) = shop.stock(&sku).incr_by(1).await {
                return store_error(&e);
            }
            return json(
                StatusCode::CONFLICT,
                r#"{"error":"one per customer"}"#.into(),
            );
        }
        Err(e) => return store_error(&e),
    }
    let id = match shop.lg.counter("orders").incr_by(1).await {
        Ok(id) => id,
        Err(e) => return store_error(&e),
    };
    if let Err(e) = shop.order(id).set(1).await {
        return store_error(&e);
    }
    json(StatusCode::CREATED, format!(r#"{{"order":{id}}}"#))
}

/// Runs under the lock `pay:order:{id}`, which puts the clicks on one order
/// in a row. The check below is what makes the order charged once: each
/// click, once it holds the lock, reads the order's status and charges only
/// when nobody has. The status is a fenced value written with the lock's
/// fencing token (handed to the handler by the layer), and `charging` is
/// written before the charge: a click that stalled past its lease, while
/// another took the lock, is refused that write and charges nothing.
async fn pay(
    State(shop): State<Shop>,
    Path(id): Path<i64>,
    Extension(lease): Extension<LeaseWatch>,
) -> Response {
    match shop.order(id).get().await {
        Ok(0) => return json(StatusCode::NOT_FOUND, r#"{"error":"no such order"}"#.into()),
        Ok(_) => {}
        Err(e) => return store_error(&e),
    }
    let status = shop.status(id);
    match status.read().await {
        Ok(None) => {}
        Ok(Some(s)) if s.value == b"paid" => {
            return json(StatusCode::CONFLICT, r#"{"error":"already paid"}"#.into());
        }
        // An attempt that lost its lease mid-charge: whether its charge went
        // through is the payment provider's to say (the order id is its
        // idempotency key).
        Ok(Some(_)) => {
            return json(
                StatusCode::CONFLICT,
                r#"{"error":"payment pending"}"#.into(),
            );
        }
        Err(e) => return store_error(&e),
    }
    let token = lease.fencing_token();
    if let Err(e) = status.write(token, "charging").await {
        return fenced_error(&e);
    }
    // The payment provider.
    tokio::time::sleep(CHARGE_TIME).await;
    for charges in [shop.lg.counter("charges"), shop.charges(id)] {
        if let Err(e) = charges.incr_by(1).await {
            return store_error(&e);
        }
    }
    if let Err(e) = status.write(token, "paid").await {
        return fenced_error(&e);
    }
    json(
        StatusCode::OK,
        format!(r#"{{"order":{id},"status":"paid"}}"#),
    )
}

/// A fenced write refused (a newer payment attempt holds the order's lock)
/// or failed.
fn fenced_error(e: &Error) -> Response {
    if e.is_stale_fencing_token() {
        json(
            StatusCode::CONFLICT,
            r#"{"error":"a newer payment attempt took over"}"#.into(),
        )
    } else {
        store_error(e)
    }
}

async fn stock(State(shop): State<Shop>, Path(sku): Path<String>) -> Response {
    if sku != SKU {
        return json(StatusCode::NOT_FOUND, r#"{"error":"no such item"}"#.into());
    }
    match shop.stock(&sku).get().await {
        Ok(left) => json(
            StatusCode::OK,
            format!(r#"{{"sku":"{sku}","left":{left}}}"#),
        ),
        Err(e) => store_error(&e),
    }
}

/// Hands the connection's address to the key extractors as a plain
/// `SocketAddr` extension. (With lockguard-tower's `axum` feature they
/// read axum's `ConnectInfo` themselves and this is not needed.)
async fn peer_addr(
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    mut req: Request,
    next: Next,
) -> Response {
    req.extensions_mut().insert(addr);
    next.run(req).await
}

/// The shop's own refusal body for an order still busy when a payment's
/// wait ran out: JSON like its other errors. The layer adds `Retry-After`
/// from the holder's lease.
fn order_busy(refusal: &Refusal) -> http::Response<Bytes> {
    let mut res = http::Response::new(Bytes::from(format!(
        r#"{{"error":"payment in progress","policy":"{}"}}"#,
        refusal.policy
    )));
    *res.status_mut() = refusal.status;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    res
}

/// The service; `limits` says whether the store offers rate limiting
/// (ZooKeeper does not: the sale then runs without its rate limits).
fn app(lg: &Client, limits: bool) -> Result<Router, Error> {
    // Clients come through a load balancer on this host: believe the
    // address it appends to X-Forwarded-For, and nothing a client forges
    // to its left.
    let client = ClientIp::x_forwarded_for(TrustedProxies::loopback());
    let per_client = RateLimitLayer::new(
        lg.rate_limiter("buy-per-client", Quota::per_minute(10)),
        client,
    );
    let per_user = RateLimitLayer::new(
        lg.rate_limiter("buy-per-user", Quota::per_minute(3)),
        Header::new(USER_ID),
    )
    .on_missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED));
    let order_id = |req: &Request| {
        let id = req
            .uri()
            .path()
            .strip_prefix("/orders/")?
            .strip_suffix("/pay")?;
        Some(format!("order:{id}"))
    };
    // Checked here, at start-up: a setting that cannot work is an error
    // now, not a 500 on every request.
    let per_client = per_client.validate()?;
    let per_user = per_user.validate()?;
    // Clicks on one order wait for each other, in arrival order.
    let pay_lock = LockLayer::new(lg.clone(), "pay", order_id)
        .wait(PAY_WAIT)
        .on_refusal(order_busy)
        .validate()?;
    // Layers run outside in: per client first, then per user.
    let buy = if limits {
        post(buy).route_layer(per_user).route_layer(per_client)
    } else {
        post(buy)
    };
    Ok(Router::new()
        .route("/buy/{sku}", buy)
        .route("/orders/{id}/pay", post(pay).route_layer(pay_lock))
        .route("/stock/{sku}", get(stock))
        .layer(middleware::from_fn(peer_addr))
        .with_state(Shop { lg: lg.clone() }))
}

// ------------------------------------------------------------ the shoppers

/// One HTTP exchange, as the shoppers see it.
struct Answer {
    status: StatusCode,
    body: String,
}

#[derive(Clone)]
struct Shoppers {
    http: HttpClient<HttpConnector, Full<Bytes>>,
    base: String,
    /// At most this many requests in flight, to be kind to small machines.
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl Shoppers {
    fn new(addr: SocketAddr) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self {
            http: HttpClient::builder(TokioExecutor::new()).build(connector),
            base: format!("http://{addr}"),
            in_flight: Arc::new(tokio::sync::Semaphore::new(64)),
        }
    }

    async fn send(&self, method: Method, path: &str, client_ip: &str, user: &str) -> Answer {
        let _slot = self.in_flight.acquire().await.expect("never closed");
        let req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("x-forwarded-for", client_ip)
            .header(USER_ID, user)
            .body(Full::new(Bytes::new()))
            .expect("valid request");
        match self.http.request(req).await {
            Ok(res) => {
                let status = res.status();
                let body = match res.into_body().collect().await {
                    Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
                    Err(e) => format!("body error: {e}"),
                };
                Answer { status, body }
            }
            Err(e) => Answer {
                status: StatusCode::BAD_GATEWAY,
                body: format!("request failed: {e}"),
            },
        }
    }

    async fn buy(&self, client_ip: &str, user: &str) -> Answer {
        self.send(Method::POST, &format!("/buy/{SKU}"), client_ip, user)
            .await
    }
}

/// What the buy requests came back with.
#[derive(Default)]
struct Tally {
    counts: BTreeMap<&'static str, u64>,
    orders: Vec<i64>,
    requests: u64,
}

impl Tally {
    fn record(&mut self, answer: Answer) {
        self.requests += 1;
        let outcome = match answer.status {
            StatusCode::CREATED => {
                let id = answer
                    .body
                    .trim_start_matches(r#"{"order":"#)
                    .trim_end_matches('}')
                    .parse()
                    .unwrap_or(0);
                self.orders.push(id);
                "sold"
            }
            StatusCode::CONFLICT if answer.body.contains("sold out") => "sold out",
            StatusCode::CONFLICT if answer.body.contains("one per customer") => "one per customer",
            StatusCode::TOO_MANY_REQUESTS if answer.body.contains("buy-per-client") => {
                "rate limited per client"
            }
            StatusCode::TOO_MANY_REQUESTS => "rate limited per user",
            _ => {
                eprintln!("unexpected answer: {} {}", answer.status, answer.body);
                "other"
            }
        };
        *self.counts.entry(outcome).or_default() += 1;
    }

    fn get(&self, outcome: &str) -> u64 {
        self.counts.get(outcome).copied().unwrap_or(0)
    }
}

async fn run_all<F>(tasks: Vec<F>) -> Vec<Answer>
where
    F: Future<Output = Answer> + Send + 'static,
{
    let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
    let mut answers = Vec::with_capacity(handles.len());
    for h in handles {
        answers.push(h.await.expect("shopper task panicked"));
    }
    answers
}

/// The sale: bots and an impatient shopper first, then the crowd, then
/// everyone who got a hoodie pays with a double click.
async fn drive(shoppers: &Shoppers) -> (Tally, Payments) {
    let mut tally = Tally::default();

    // Two bots, each behind one address, try 40 purchases under 40 made-up
    // user ids; an impatient shopper clicks "buy" six times at once.
    let mut burst = Vec::new();
    for bot in ["203.0.113.66", "203.0.113.77"] {
        for n in 0..40 {
            let (s, user) = (shoppers.clone(), format!("bot-{bot}-{n}"));
            burst.push(tokio::spawn(async move { s.buy(bot, &user).await }));
        }
    }
    for _ in 0..6 {
        let s = shoppers.clone();
        burst.push(tokio::spawn(
            async move { s.buy("198.51.100.1", "ada").await },
        ));
    }
    for h in burst {
        tally.record(h.await.expect("shopper task panicked"));
    }

    // The crowd: 300 shoppers from 60 addresses, 5 behind each.
    let crowd: Vec<_> = (0..300)
        .map(|n| {
            let s = shoppers.clone();
            async move {
                let ip = format!("198.51.100.{}", 10 + n % 60);
                s.buy(&ip, &format!("shopper-{n}")).await
            }
        })
        .collect();
    for answer in run_all(crowd).await {
        tally.record(answer);
    }

    // Every buyer pays twice at once (the double click), and the first
    // order gets eight payments at once. The lock puts them in a row; the
    // status read under it lets one charge and answers the others
    // `already paid`.
    let clicks: Vec<_> = tally
        .orders
        .iter()
        .enumerate()
        .flat_map(|(i, &id)| {
            let n = if i == 0 { SAME_ORDER_CLICKS } else { 2 };
            std::iter::repeat_n(id, n)
        })
        .map(|id| {
            let s = shoppers.clone();
            async move {
                s.send(
                    Method::POST,
                    &format!("/orders/{id}/pay"),
                    "198.51.100.2",
                    "payer",
                )
                .await
            }
        })
        .collect();
    let mut payments = Payments::default();
    for answer in run_all(clicks).await {
        payments.requests += 1;
        match answer.status {
            StatusCode::OK => payments.accepted += 1,
            StatusCode::CONFLICT if answer.body.contains("already paid") => {
                payments.already_paid += 1
            }
            // The lock layer's refusal: the wait for the order ran out.
            StatusCode::CONFLICT if answer.body.contains("payment in progress") => {
                payments.locked += 1
            }
            other => {
                eprintln!("unexpected payment answer: {other} {}", answer.body);
                payments.other += 1;
            }
        }
    }
    (tally, payments)
}

/// What the payment requests came back with.
#[derive(Default)]
struct Payments {
    requests: u64,
    accepted: u64,
    already_paid: u64,
    locked: u64,
    other: u64,
}

/// How many times the provider charged each order, read from the store:
/// (orders charged once, orders charged more than once, orders never
/// charged).
async fn charges_per_order(shop: &Shop, orders: &[i64]) -> Result<(u64, u64, u64), Error> {
    let reads: Vec<_> = orders
        .iter()
        .map(|&id| {
            let charges = shop.charges(id);
            tokio::spawn(async move { charges.get().await })
        })
        .collect();
    let (mut once, mut more, mut never) = (0, 0, 0);
    for read in reads {
        match read.await.expect("read task panicked")? {
            0 => never += 1,
            1 => once += 1,
            _ => more += 1,
        }
    }
    Ok((once, more, never))
}

// ------------------------------------------------------------------- main

fn usage(code: i32) -> ! {
    let text = [
        "usage: flash_sale [--serve] [--addr HOST:PORT]",
        "",
        "Runs a flash sale against itself over HTTP, prints a summary and checks it.",
        "  --serve            keep serving afterwards (Ctrl-C to stop)",
        "  --addr HOST:PORT   listen there (default 127.0.0.1:0, a free port)",
        "  LOCKGUARD_URL=...  use the store at this URL (redis://, postgres://, zookeeper://,",
        "                     ...) instead of the in-memory store; REDIS_URL is read when",
        "                     it is unset",
    ]
    .join("\n");
    if code == 0 {
        println!("{text}");
    } else {
        eprintln!("{text}");
    }
    std::process::exit(code)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();

    let (mut serve, mut addr) = (false, SocketAddr::from(([127, 0, 0, 1], 0)));
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--serve" => serve = true,
            "--addr" => match args.next().map(|a| a.parse()) {
                Some(Ok(a)) => addr = a,
                _ => usage(2),
            },
            "-h" | "--help" => usage(0),
            _ => usage(2),
        }
    }

    // A fresh key prefix per run, so runs on a shared store start clean.
    // The store at LOCKGUARD_URL (or REDIS_URL); memory when neither is set.
    let lg = Client::builder()
        .prefix(format!("flash-sale:{}:", std::process::id()))
        .from_env_or_memory()
        .await?;
    let stocked = lg.counter(&format!("stock:{SKU}")).set(INITIAL_STOCK).await;
    if let Err(e) = &stocked
        && e.is_unsupported()
    {
        eprintln!(
            "flash_sale keeps its stock in counters, which the {} store does not offer ({e}); \
             run it on memory://, redis://, postgres://, mysql:// or zookeeper://",
            lg.store_name()
        );
        std::process::exit(2);
    }
    stocked?;
    // Rate limits where the store offers them.
    let limits = match lg
        .rate_limiter("buy-per-client", Quota::per_minute(10))
        .peek("start-up")
        .await
    {
        Err(e) if e.is_unsupported() => {
            println!(
                "the {} store offers no rate limiting: the sale runs without its rate limits",
                lg.store_name()
            );
            false
        }
        _ => true,
    };

    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cannot listen on {addr}: {e}");
            std::process::exit(1);
        }
    };
    let addr = listener.local_addr().expect("bound socket has an address");
    let shop = lg.clone();
    let service = app(&lg, limits)?.into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, service).await {
            eprintln!("server error: {e}");
        }
    });

    let shoppers = Shoppers::new(addr);
    let started = Instant::now();
    let (tally, payments) = drive(&shoppers).await;
    let elapsed = started.elapsed();
    let left_answer = shoppers
        .send(
            Method::GET,
            &format!("/stock/{SKU}"),
            "198.51.100.2",
            "auditor",
        )
        .await;
    let left: i64 = left_answer
        .body
        .rsplit(':')
        .next()
        .and_then(|v| v.trim_end_matches('}').parse().ok())
        .unwrap_or(-1);
    let charged = shop.counter("charges").get().await?;
    let orders = shop.counter("orders").get().await?;
    let view = Shop { lg: shop.clone() };
    let (once, more, never) = charges_per_order(&view, &tally.orders).await?;
    // The order that got eight payments at once, and its charges.
    let first = tally.orders.first().copied().unwrap_or(0);
    let first_charges = view.charges(first).get().await?;

    let sold = tally.get("sold");
    let store = shop.store_name();
    println!();
    println!(
        "flash sale: {INITIAL_STOCK} x {SKU:?} on the {store} store, {} buy requests over HTTP in {:.2} s",
        tally.requests,
        elapsed.as_secs_f64()
    );
    println!();
    let rows = [
        ("sold", sold),
        ("refused: sold out", tally.get("sold out")),
        (
            "refused: rate limited per client",
            tally.get("rate limited per client"),
        ),
        (
            "refused: rate limited per user",
            tally.get("rate limited per user"),
        ),
        ("refused: one per customer", tally.get("one per customer")),
        ("payment requests", payments.requests),
        ("payments accepted", payments.accepted),
        (
            "refused: already paid (read under the lock)",
            payments.already_paid,
        ),
        (
            "refused: order still locked after the wait",
            payments.locked,
        ),
        (
            "cards charged (counted in the store)",
            charged.max(0).unsigned_abs(),
        ),
        ("orders charged more than once", more),
    ];
    for (what, n) in rows {
        println!("  {what:<44} {n:>6}");
    }
    println!(
        "  {:<44} {left:>6}",
        format!("stock left (GET /stock/{SKU})")
    );
    println!();

    let checks = [
        (
            format!("sold == initial stock ({INITIAL_STOCK})"),
            sold == INITIAL_STOCK as u64,
        ),
        (
            "never oversold (orders == sold, stock left == 0)".to_owned(),
            orders == INITIAL_STOCK && left == 0,
        ),
        (
            "every order charged exactly once (counted per order in the store)".to_owned(),
            once == sold && more == 0 && never == 0 && charged == INITIAL_STOCK,
        ),
        (
            format!("the {SAME_ORDER_CLICKS} payments of order {first} at once charged it once"),
            first_charges == 1,
        ),
        (
            "one payment accepted per order, every other one refused".to_owned(),
            payments.accepted == sold
                && payments.already_paid + payments.locked == payments.requests - sold,
        ),
        if limits {
            (
                "rate limits refused the bots and the impatient".to_owned(),
                tally.get("rate limited per client") > 0 && tally.get("rate limited per user") > 0,
            )
        } else {
            (
                "no request rate limited (the store offers no rate limiting)".to_owned(),
                tally.get("rate limited per client") == 0
                    && tally.get("rate limited per user") == 0,
            )
        },
        (
            "no unexpected answer".to_owned(),
            tally.get("other") == 0 && payments.other == 0,
        ),
    ];
    let mut ok = true;
    for (what, passed) in &checks {
        println!("  [{}] {what}", if *passed { "ok" } else { "FAILED" });
        ok &= passed;
    }

    if serve && ok {
        // Restock, so there is something left to buy by hand.
        shop.counter(&format!("stock:{SKU}"))
            .set(INITIAL_STOCK)
            .await?;
        println!();
        println!(
            "restocked {INITIAL_STOCK} x {SKU:?}; serving on http://{addr} (Ctrl-C to stop), for instance:"
        );
        println!("  curl -i http://{addr}/stock/{SKU}");
        println!("  curl -i -X POST -H 'x-user-id: you' http://{addr}/buy/{SKU}");
        println!("  curl -i -X POST http://{addr}/orders/1/pay");
        let _ = tokio::signal::ctrl_c().await;
    }
    server.abort();
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
