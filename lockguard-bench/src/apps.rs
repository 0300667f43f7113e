//! The hello-world of the HTTP benchmarks with each layer. Shared by the
//! benchmark (`http.rs`) and the examples that drive it
//! (`examples/layer_cost.rs`, `examples/http_server.rs`, which include this
//! file by path).

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use lockguard_core::{Client, Quota};
use lockguard_tower::{ConcurrencyLimitLayer, LockLayer, RateLimitLayer, key};

/// The variants' names.
pub(crate) const VARIANTS: &str = "none, rate, rate-decision, governor, rate-per-ip, governor-per-ip, rate-bare, governor-bare, rate-per-ip-bare, governor-per-ip-bare, rate-per-client, governor-per-client, lock, lock-fixed-lease, concurrency";

/// Whether the variant keys by the peer's IP address, so that its server
/// must record it (`into_make_service_with_connect_info::<SocketAddr>()`).
pub(crate) fn needs_peer_address(variant: &str) -> bool {
    variant.contains("-per-ip")
}

/// The hello-world with the layer `variant` names, on `lg`'s store; or,
/// for a name not in [`VARIANTS`], a message naming them. Locks and the
/// `-per-client` limits are keyed by the `x-conn` header; the `-per-ip`
/// limits by the peer's IP address (axum's `ConnectInfo`), each with its
/// own crate's extractor (`key::PeerIp`, tower_governor's
/// `PeerIpKeyExtractor`), as most axum services key their limits. The
/// `-bare` limits answer without rate-limit headers (tower_governor
/// without `use_headers`, ours with `standard_headers(false)`), to tell
/// what a decision costs from what its headers do.
pub(crate) fn app(variant: &str, lg: Client) -> Result<Router, String> {
    let hello = Router::new().route("/", get(|| async { "hello" }));
    let conn_key = key::Header::new(http::HeaderName::from_static("x-conn"));
    Ok(match variant {
        "none" => hello,
        "rate" => hello.layer(RateLimitLayer::new(
            lg.rate_limiter("bench", Quota::per_second(1_000_000)),
            key::Global,
        )),
        "rate-decision" => hello.layer(
            RateLimitLayer::new(
                lg.rate_limiter("bench", Quota::per_second(1_000_000)),
                key::Global,
            )
            .decision_extension(true),
        ),
        "rate-per-client" => hello.layer(RateLimitLayer::new(
            lg.rate_limiter("bench", Quota::per_second(1_000_000)),
            conn_key,
        )),
        "rate-per-ip" => hello.layer(RateLimitLayer::new(
            lg.rate_limiter("bench", Quota::per_second(1_000_000)),
            key::PeerIp::new(),
        )),
        "governor-per-ip" => {
            let config = tower_governor::governor::GovernorConfigBuilder::default()
                .per_nanosecond(1000)
                .burst_size(1_000_000)
                .key_extractor(tower_governor::key_extractor::PeerIpKeyExtractor)
                .use_headers()
                .finish()
                .expect("a valid governor configuration");
            hello.layer(tower_governor::GovernorLayer::new(config))
        }
        "rate-bare" => hello.layer(
            RateLimitLayer::new(
                lg.rate_limiter("bench", Quota::per_second(1_000_000)),
                key::Global,
            )
            .standard_headers(false),
        ),
        "governor-bare" => {
            let config = tower_governor::governor::GovernorConfigBuilder::default()
                .per_nanosecond(1000)
                .burst_size(1_000_000)
                .key_extractor(tower_governor::key_extractor::GlobalKeyExtractor)
                .finish()
                .expect("a valid governor configuration");
            hello.layer(tower_governor::GovernorLayer::new(config))
        }
        "rate-per-ip-bare" => hello.layer(
            RateLimitLayer::new(
                lg.rate_limiter("bench", Quota::per_second(1_000_000)),
                key::PeerIp::new(),
            )
            .standard_headers(false),
        ),
        "governor-per-ip-bare" => {
            let config = tower_governor::governor::GovernorConfigBuilder::default()
                .per_nanosecond(1000)
                .burst_size(1_000_000)
                .key_extractor(tower_governor::key_extractor::PeerIpKeyExtractor)
                .finish()
                .expect("a valid governor configuration");
            hello.layer(tower_governor::GovernorLayer::new(config))
        }
        "governor-per-client" => {
            let config = tower_governor::governor::GovernorConfigBuilder::default()
                .per_nanosecond(1000)
                .burst_size(1_000_000)
                .key_extractor(ConnKey)
                .use_headers()
                .finish()
                .expect("a valid governor configuration");
            hello.layer(tower_governor::GovernorLayer::new(config))
        }
        "lock" => hello.layer(LockLayer::new(lg, "bench", conn_key)),
        "lock-fixed-lease" => {
            hello.layer(LockLayer::new(lg, "bench", conn_key).lease(Duration::from_secs(30)))
        }
        "concurrency" => hello.layer(ConcurrencyLimitLayer::new(lg, "bench", 1000, key::Global)),
        "governor" => {
            // The same quota: one request per µs, a burst of a million;
            // with its rate-limit headers on, as ours are.
            let config = tower_governor::governor::GovernorConfigBuilder::default()
                .per_nanosecond(1000)
                .burst_size(1_000_000)
                .key_extractor(tower_governor::key_extractor::GlobalKeyExtractor)
                .use_headers()
                .finish()
                .expect("a valid governor configuration");
            hello.layer(tower_governor::GovernorLayer::new(config))
        }
        other => return Err(format!("unknown variant {other:?}: {VARIANTS}")),
    })
}

/// tower_governor's key for `-per-client`: the `x-conn` header, as
/// `key::Header` is ours.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnKey;

impl tower_governor::key_extractor::KeyExtractor for ConnKey {
    type Key = String;

    fn extract<T>(
        &self,
        req: &http::Request<T>,
    ) -> Result<Self::Key, tower_governor::GovernorError> {
        req.headers()
            .get("x-conn")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or(tower_governor::GovernorError::UnableToExtractKey)
    }
}
