//! Unit tests of the rate-limit layer on the in-memory store, with paused
//! time and `oneshot`.

use std::convert::Infallible;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::BodyExt;
use lockguard_core::{Algorithm, Client, Quota};
use tower::{Layer, Service, ServiceExt, service_fn};

use super::*;
use crate::{MissingKey, key};

fn ok_service()
-> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future = impl Send> + Clone
{
    service_fn(|_req: Request<Body>| async { Ok::<_, Infallible>(Response::new(Body::from("ok"))) })
}

fn user_key() -> key::Header {
    key::Header::new(HeaderName::from_static("x-user"))
}

fn request(user: Option<&str>) -> Request<Body> {
    let mut b = Request::get("/");
    if let Some(u) = user {
        b = b.header("x-user", u);
    }
    b.body(Body::empty()).unwrap()
}

fn header<B>(res: &Response<B>, name: &str) -> Option<String> {
    res.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

async fn body_string<B: http_body::Body>(res: Response<B>) -> String
where
    B::Error: std::fmt::Debug,
{
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn success_and_refusal_carry_the_ietf_headers() {
    let lg = Client::memory();
    let layer = RateLimitLayer::new(lg.rate_limiter("api", Quota::per_minute(2)), user_key());
    let svc = layer.layer(ok_service());

    let first = svc.clone().oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        header(&first, "ratelimit-policy").as_deref(),
        Some("\"api\";q=2;w=60")
    );
    assert_eq!(
        header(&first, "ratelimit").as_deref(),
        Some("\"api\";r=1;t=30")
    );
    assert_eq!(header(&first, "retry-after"), None);
    assert_eq!(
        header(&first, "x-ratelimit-limit"),
        None,
        "legacy headers are opt-in"
    );
    assert_eq!(body_string(first).await, "ok");

    let second = svc.clone().oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(
        header(&second, "ratelimit").as_deref(),
        Some("\"api\";r=0;t=60")
    );

    let refused = svc.clone().oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("30"));
    // On a refusal `t` ends when Retry-After does (draft-11 §6).
    assert_eq!(
        header(&refused, "ratelimit").as_deref(),
        Some("\"api\";r=0;t=30")
    );
    assert_eq!(
        header(&refused, "ratelimit-policy").as_deref(),
        Some("\"api\";q=2;w=60")
    );
    assert_eq!(
        header(&refused, "content-type").as_deref(),
        Some("application/problem+json")
    );
    assert_eq!(
        body_string(refused).await,
        r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"rate limit \"api\" exceeded; retry in 30 s","retry_after":30,"violated-policies":["api"]}"#
    );

    // Another key has its own budget.
    let other = svc.clone().oneshot(request(Some("bob"))).await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);

    // Once Retry-After has passed, the retry is admitted.
    tokio::time::advance(Duration::from_secs(30)).await;
    let again = svc.oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn retry_after_rounds_sub_second_waits_up() {
    let lg = Client::memory();
    let layer = RateLimitLayer::new(
        lg.rate_limiter("fine", Quota::new(1, Duration::from_millis(1500))),
        key::Global,
    );
    let svc = layer.layer(ok_service());
    assert_eq!(
        svc.clone().oneshot(request(None)).await.unwrap().status(),
        200
    );
    let refused = svc.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("2"));
    assert_eq!(
        header(&refused, "ratelimit-policy").as_deref(),
        Some("\"fine\";q=1;w=2")
    );
    tokio::time::advance(Duration::from_millis(1499)).await;
    let refused = svc.clone().oneshot(request(None)).await.unwrap();
    // 1 ms left: 1 s, never 0.
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("1"));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(svc.oneshot(request(None)).await.unwrap().status(), 200);
}

#[tokio::test(start_paused = true)]
async fn stacked_layers_list_both_policies_and_legacy_shows_the_tightest() {
    let lg = Client::memory();
    let per_user = RateLimitLayer::new(
        lg.rate_limiter("user", Quota::per_minute(10))
            .algorithm(Algorithm::FixedWindow),
        user_key(),
    )
    .legacy_headers(true);
    let global = RateLimitLayer::new(
        lg.rate_limiter("global", Quota::per_minute(3))
            .algorithm(Algorithm::FixedWindow),
        key::Global,
    )
    .legacy_headers(true);
    let svc = global.layer(per_user.layer(ok_service()));
    let res = svc.oneshot(request(Some("ada"))).await.unwrap();
    let policies: Vec<_> = res.headers().get_all("ratelimit-policy").iter().collect();
    assert_eq!(policies, ["\"user\";q=10;w=60", "\"global\";q=3;w=60"]);
    let limits: Vec<_> = res.headers().get_all("ratelimit").iter().collect();
    assert_eq!(limits, ["\"user\";r=9;t=60", "\"global\";r=2;t=60"]);
    assert_eq!(header(&res, "x-ratelimit-limit").as_deref(), Some("3"));
    assert_eq!(header(&res, "x-ratelimit-remaining").as_deref(), Some("2"));
    assert_eq!(header(&res, "x-ratelimit-reset").as_deref(), Some("60"));
}

#[tokio::test]
async fn standard_headers_can_be_turned_off() {
    let lg = Client::memory();
    let layer = RateLimitLayer::new(lg.rate_limiter("quiet", Quota::per_minute(1)), key::Global)
        .standard_headers(false);
    let svc = layer.layer(ok_service());
    let res = svc.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(header(&res, "ratelimit"), None);
    let refused = svc.oneshot(request(None)).await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "ratelimit"), None);
    assert!(
        header(&refused, "retry-after").is_some(),
        "Retry-After is always sent"
    );
}

#[tokio::test]
async fn missing_key_is_rejected_or_passed_as_configured() {
    let lg = Client::memory();
    let limiter = lg.rate_limiter("keyed", Quota::per_minute(1));
    let default = RateLimitLayer::new(limiter.clone(), user_key()).layer(ok_service());
    let res = default.oneshot(request(None)).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    assert!(body_string(res).await.contains("\"status\":400"));

    let unauthorized = RateLimitLayer::new(limiter.clone(), user_key())
        .on_missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED))
        .layer(ok_service());
    assert_eq!(
        unauthorized.oneshot(request(None)).await.unwrap().status(),
        401
    );

    let pass = RateLimitLayer::new(limiter, user_key())
        .on_missing_key(MissingKey::Pass)
        .layer(ok_service());
    for _ in 0..3 {
        let res = pass.clone().oneshot(request(None)).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "no key, no limit");
        assert_eq!(header(&res, "ratelimit"), None);
    }
}

#[tokio::test]
async fn an_oversized_or_control_character_key_is_missing_not_an_error() {
    let lg = Client::memory();
    let svc = RateLimitLayer::new(lg.rate_limiter("keys", Quota::per_minute(5)), user_key())
        .layer(ok_service());
    let long = "k".repeat(5000);
    let res = svc.clone().oneshot(request(Some(&long))).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let res = svc.oneshot(request(Some("a\tb"))).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
}

/// A closure's key is checked as a rule's is: one the store would refuse
/// is missing (400 by default), not a broken limiter (500).
#[tokio::test]
async fn a_closure_s_unusable_key_is_missing_not_an_error() {
    let lg = Client::memory();
    let limiter = lg.rate_limiter("closure-keys", Quota::per_minute(5));
    let svc = RateLimitLayer::with_policy(move |req: &Request<Body>| {
        let user = req.headers().get("x-user")?.to_str().ok()?;
        Some(Selection::new(limiter.clone(), Some(user.to_owned())))
    })
    .layer(ok_service());
    for bad in ["a\tb", &"k".repeat(5000)] {
        let res = svc.clone().oneshot(request(Some(bad))).await.unwrap();
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{:.10}", bad);
    }
    let res = svc.oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_quota_that_cannot_work_is_a_server_error() {
    let lg = Client::memory();
    let svc = RateLimitLayer::new(lg.rate_limiter("broken", Quota::per_second(0)), key::Global)
        .fail_open()
        .layer(ok_service());
    let res = svc.oneshot(request(None)).await.unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body_string(res).await.contains("misconfigured"));
}

#[tokio::test]
async fn clones_of_the_layer_and_service_share_one_budget() {
    let lg = Client::memory();
    let layer = RateLimitLayer::new(lg.rate_limiter("shared", Quota::per_minute(2)), key::Global);
    // As axum does: one service per route, cloned per connection.
    let a = layer.clone().layer(ok_service());
    let b = layer.layer(ok_service());
    assert_eq!(
        a.clone().oneshot(request(None)).await.unwrap().status(),
        200
    );
    assert_eq!(
        b.clone().oneshot(request(None)).await.unwrap().status(),
        200
    );
    assert_eq!(a.oneshot(request(None)).await.unwrap().status(), 429);
    assert_eq!(b.oneshot(request(None)).await.unwrap().status(), 429);
}

#[tokio::test]
async fn cost_and_closure_policies() {
    let lg = Client::memory();
    let heavy = Rule::new(lg.rate_limiter("heavy", Quota::per_minute(10)), key::Global).cost(4);
    let svc = RateLimitLayer::with_policy(heavy).layer(ok_service());
    let res = svc.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(
        header(&res, "ratelimit").as_deref(),
        Some("\"heavy\";r=6;t=24")
    );
    svc.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(svc.oneshot(request(None)).await.unwrap().status(), 429);

    // A closure: only requests with a user are limited.
    let limiter = lg.rate_limiter("closure", Quota::per_minute(1));
    let policy = move |req: &Request<Body>| {
        let user = req.headers().get("x-user")?.to_str().ok()?;
        Some(Selection::new(
            limiter.clone(),
            Some(format!("user:{user}")),
        ))
    };
    let svc = RateLimitLayer::with_policy(policy).layer(ok_service());
    assert_eq!(
        svc.clone()
            .oneshot(request(Some("a")))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        svc.clone()
            .oneshot(request(Some("a")))
            .await
            .unwrap()
            .status(),
        429
    );
    let anonymous = svc.oneshot(request(None)).await.unwrap();
    assert_eq!(anonymous.status(), 200);
    assert_eq!(header(&anonymous, "ratelimit"), None);
}

/// A service that is never ready and fails every call.
#[derive(Clone)]
struct Stubborn;

impl Service<Request<Body>> for Stubborn {
    type Response = Response<Body>;
    type Error = &'static str;
    type Future = std::future::Ready<Result<Response<Body>, &'static str>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Pending
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        std::future::ready(Err("inner failed"))
    }
}

#[tokio::test]
async fn poll_ready_forwards_and_errors_are_the_inner_services() {
    let lg = Client::memory();
    let layer = RateLimitLayer::new(lg.rate_limiter("fwd", Quota::per_minute(5)), key::Global);
    let mut svc = layer.layer(Stubborn);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(
        svc.poll_ready(&mut cx).is_pending(),
        "not ready inside, not ready outside"
    );
    let err = svc.call(request(None)).await.unwrap_err();
    assert_eq!(err, "inner failed");
}

/// Asked to, the layer puts the limiter's decision in the request's
/// extensions for the handler.
#[tokio::test(start_paused = true)]
async fn the_handler_sees_the_decision() {
    let lg = Client::memory();
    let layer = RateLimitLayer::new(lg.rate_limiter("seen", Quota::per_minute(5)), user_key())
        .decision_extension(true);
    let svc = layer.layer(service_fn(|req: Request<Body>| async move {
        let d = req
            .extensions()
            .get::<lockguard_core::Decision>()
            .copied()
            .expect("no decision in the request");
        Ok::<_, Infallible>(Response::new(Body::from(format!(
            "{} {}",
            d.allowed, d.remaining
        ))))
    }));
    let res = svc.clone().oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(body_string(res).await, "true 4");
    let res = svc.oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(body_string(res).await, "true 3");
}

/// Unless asked, the request reaches the handler without the decision,
/// and the response still carries it in its headers.
#[tokio::test(start_paused = true)]
async fn the_decision_stays_out_of_the_request_unless_asked() {
    let lg = Client::memory();
    let layer = RateLimitLayer::new(lg.rate_limiter("unseen", Quota::per_minute(5)), user_key());
    let svc = layer.layer(service_fn(|req: Request<Body>| async move {
        let seen = req.extensions().get::<lockguard_core::Decision>().is_some();
        Ok::<_, Infallible>(Response::new(Body::from(seen.to_string())))
    }));
    let res = svc.oneshot(request(Some("ada"))).await.unwrap();
    assert!(res.headers().contains_key("ratelimit"));
    assert_eq!(body_string(res).await, "false");
}

/// A refusal hook writes its own body; the layer still sends the
/// `RateLimit` headers and `Retry-After`, and the hook gets the decision.
#[tokio::test(start_paused = true)]
async fn a_refusal_hook_builds_the_body_and_headers_stay() {
    let lg = Client::memory();
    let layer = RateLimitLayer::new(lg.rate_limiter("hooked", Quota::per_minute(1)), user_key())
        .on_refusal(|r: &crate::Refusal| {
            assert_eq!(r.kind, crate::RefusalKind::RateLimited);
            let d = r
                .decision
                .expect("a rate-limit refusal carries its decision");
            let mut res = Response::new(bytes::Bytes::from(format!(
                "{{\"error\":\"slow down\",\"policy\":\"{}\",\"remaining\":{}}}",
                r.policy, d.remaining
            )));
            *res.status_mut() = r.status;
            res
        });
    let svc = layer.layer(ok_service());
    assert_eq!(
        svc.clone()
            .oneshot(request(Some("ada")))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let refused = svc.oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("60"));
    assert_eq!(
        header(&refused, "ratelimit").as_deref(),
        Some("\"hooked\";r=0;t=60")
    );
    assert_eq!(
        body_string(refused).await,
        "{\"error\":\"slow down\",\"policy\":\"hooked\",\"remaining\":0}"
    );
}

/// A configuration that cannot work fails at start-up.
#[test]
fn validate_refuses_what_could_never_pass() {
    let lg = Client::memory();
    let costly = Rule::new(lg.rate_limiter("costly", Quota::per_second(5)), key::Global).cost(6);
    let err = RateLimitLayer::with_policy(costly).validate().unwrap_err();
    assert!(
        err.is_invalid_input() && err.to_string().contains("costly"),
        "{err}"
    );
    let braced = RateLimitLayer::new(lg.rate_limiter("a{b}", Quota::per_second(5)), key::Global);
    assert!(braced.validate().unwrap_err().is_invalid_input());
    let table: crate::RateLimitTable<Body> = crate::RateLimitTable::new()
        .any(
            "/ok",
            Rule::new(lg.rate_limiter("ok", Quota::per_second(5)), key::Global),
        )
        .any(
            "/bad",
            Rule::new(lg.rate_limiter("bad", Quota::per_second(5)), key::Global).cost(0),
        );
    assert!(
        RateLimitLayer::with_policy(table)
            .validate()
            .unwrap_err()
            .is_invalid_input()
    );
    let fine = RateLimitLayer::new(lg.rate_limiter("fine", Quota::per_second(5)), key::Global);
    assert!(fine.validate().is_ok());
}

/// The name and integer parameters of each item of a structured-field
/// list, parsed by an RFC 9651 parser.
fn sf_items(value: &str) -> Vec<(String, std::collections::BTreeMap<String, i64>)> {
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .expect("a structured-field list");
    list.into_iter()
        .map(|entry| match entry {
            sfv::ListEntry::Item(item) => (
                item.bare_item
                    .as_string()
                    .expect("a string item")
                    .as_str()
                    .to_owned(),
                item.params
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.as_str().to_owned(),
                            i64::from(v.as_integer().expect("integer")),
                        )
                    })
                    .collect(),
            ),
            sfv::ListEntry::InnerList(_) => panic!("inner list in {value:?}"),
        })
        .collect()
}

/// draft-ietf-httpapi-ratelimit-headers-11, point by point: windows are
/// whole seconds with `q` at the true rate, a burst above `q` is said, and
/// a refusal's `t` never ends after its `Retry-After`.
#[tokio::test(start_paused = true)]
async fn headers_follow_draft_11() {
    let lg = Client::memory();
    // 10 per 100 ms is 100 per second, not 10 (w is whole seconds).
    let fast = RateLimitLayer::new(
        lg.rate_limiter("fast", Quota::new(10, Duration::from_millis(100))),
        user_key(),
    )
    .layer(ok_service());
    let res = fast.oneshot(request(Some("ada"))).await.unwrap();
    let policy = sf_items(&header(&res, "ratelimit-policy").unwrap());
    assert_eq!(policy.len(), 1);
    assert_eq!((policy[0].1["q"], policy[0].1["w"]), (100, 1));
    // 3 per 1.5 s is stated over 2 s: 4, rounded down from the true rate.
    let odd = RateLimitLayer::new(
        lg.rate_limiter("odd", Quota::new(3, Duration::from_millis(1500))),
        user_key(),
    )
    .layer(ok_service());
    let res = odd.oneshot(request(Some("ada"))).await.unwrap();
    let policy = sf_items(&header(&res, "ratelimit-policy").unwrap());
    assert_eq!((policy[0].1["q"], policy[0].1["w"]), (4, 2));
    // A GCRA burst above the quota: `r` may exceed `q`, and the policy
    // says why.
    let bursty = RateLimitLayer::new(
        lg.rate_limiter("bursty", Quota::per_minute(2).burst(5)),
        user_key(),
    )
    .layer(ok_service());
    let res = bursty.clone().oneshot(request(Some("ada"))).await.unwrap();
    let policy = sf_items(&header(&res, "ratelimit-policy").unwrap());
    let limit = sf_items(&header(&res, "ratelimit").unwrap());
    assert_eq!(policy[0].1["q"], 2);
    assert_eq!(policy[0].1["lockguard-burst"], 5);
    assert_eq!(limit[0].1["r"], 4);
    // Refusals: `t` and Retry-After name the same moment.
    for _ in 0..4 {
        bursty.clone().oneshot(request(Some("ada"))).await.unwrap();
    }
    let refused = bursty.oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: i64 = header(&refused, "retry-after").unwrap().parse().unwrap();
    let limit = sf_items(&header(&refused, "ratelimit").unwrap());
    assert_eq!(limit[0].0, "bursty");
    assert_eq!((limit[0].1["r"], limit[0].1["t"]), (0, retry));
    assert!(retry >= 1);
}

/// A refusal answered from the limiter's local cache carries the same
/// headers as the store's.
#[tokio::test(start_paused = true)]
async fn cached_refusals_keep_their_headers() {
    let lg = Client::memory();
    let limiter = lg
        .rate_limiter("cached", Quota::per_minute(1))
        .cache_refusals(100);
    let svc = RateLimitLayer::new(limiter, user_key()).layer(ok_service());
    let ok = svc.clone().oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let from_store = svc.clone().oneshot(request(Some("ada"))).await.unwrap();
    let from_cache = svc.oneshot(request(Some("ada"))).await.unwrap();
    for res in [&from_store, &from_cache] {
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(res, "retry-after").as_deref(), Some("60"));
        assert_eq!(
            header(res, "ratelimit").as_deref(),
            Some("\"cached\";r=0;t=60")
        );
    }
}

/// A policy of one's own lends the limiters it owns; each request is
/// checked against the one it picks, and the budget is the store's, shared
/// by every clone of the layer.
#[tokio::test(start_paused = true)]
async fn a_policy_lends_the_limiter_it_picks() {
    struct ByMethod {
        reads: lockguard_core::RateLimiter,
        writes: lockguard_core::RateLimiter,
    }
    impl<B> RateLimitPolicy<B> for ByMethod {
        fn select(&self, req: &Request<B>) -> Option<Selection<'_>> {
            let limiter = if req.method().is_safe() {
                &self.reads
            } else {
                &self.writes
            };
            Some(Selection::borrowed(limiter, Some("k".to_owned())))
        }
    }
    let lg = Client::memory();
    let svc = RateLimitLayer::with_policy(ByMethod {
        reads: lg.rate_limiter("reads", Quota::per_minute(2)),
        writes: lg.rate_limiter("writes", Quota::per_minute(1)),
    })
    .layer(ok_service());
    let post = || Request::post("/").body(Body::empty()).unwrap();
    let first = svc.clone().oneshot(post()).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        header(&first, "ratelimit").as_deref(),
        Some("\"writes\";r=0;t=60")
    );
    assert_eq!(
        svc.clone().oneshot(post()).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Reads spend a budget of their own.
    for left in [1, 0] {
        let res = svc.clone().oneshot(request(None)).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(
            header(&res, "ratelimit").map(|v| v.contains(&format!(";r={left};"))),
            Some(true)
        );
    }
    assert_eq!(
        svc.oneshot(request(None)).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// Each response names its own limiter's policy and its own requests left,
/// however many policies one thread serves in turn (more than it keeps
/// values of), and whichever value it made last.
#[tokio::test(start_paused = true)]
async fn every_response_names_its_own_policy() {
    let lg = Client::memory();
    let services: Vec<_> = (1..=20u64)
        .map(|n| {
            RateLimitLayer::new(
                lg.rate_limiter(&format!("p{n}"), Quota::per_minute(n * 10)),
                key::Global,
            )
            .layer(ok_service())
        })
        .collect();
    for round in 0..3 {
        for (i, svc) in services.iter().enumerate() {
            let n = i + 1;
            let res = svc.clone().oneshot(request(None)).await.unwrap();
            assert_eq!(
                header(&res, "ratelimit-policy"),
                Some(format!("\"p{n}\";q={};w=60", n * 10)),
                "round {round}"
            );
            let limit = sf_items(&header(&res, "ratelimit").unwrap());
            assert_eq!(limit[0].0, format!("p{n}"), "round {round}");
            assert_eq!(
                limit[0].1["r"],
                i64::try_from(n * 10 - round - 1).unwrap(),
                "round {round}"
            );
        }
    }
    // Two limiters of one name and quota, one spent: each response tells
    // its own limiter's requests left, though the values look alike.
    let twin = |name| RateLimitLayer::new(lg.rate_limiter(name, Quota::per_minute(5)), key::Global);
    let (a, b) = (
        twin("twin").layer(ok_service()),
        twin("twin").layer(ok_service()),
    );
    let remaining = |res: &Response<_>| sf_items(&header(res, "ratelimit").unwrap())[0].1["r"];
    let first = a.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(remaining(&first), 4);
    let again = b.clone().oneshot(request(None)).await.unwrap();
    assert_eq!(remaining(&again), 3, "the two share one budget, by name");
    let lg2 = Client::memory();
    let other = RateLimitLayer::new(lg2.rate_limiter("twin", Quota::per_minute(5)), key::Global)
        .layer(ok_service());
    let fresh = other.oneshot(request(None)).await.unwrap();
    assert_eq!(
        remaining(&fresh),
        4,
        "another client's limiter of that name"
    );
}

/// Shadow mode decides and sends the headers as usual, but lets a request
/// over the quota through, its decision marked shadowed; the budget is
/// spent as it would be. The layer's shadow mode and its limiter's
/// (`RateLimiter::shadow`) answer alike.
#[tokio::test(start_paused = true)]
async fn shadow_mode_sends_the_headers_and_never_refuses() {
    let lg = Client::memory();
    let seen = || {
        service_fn(|req: Request<Body>| async move {
            let d = req.extensions().get::<lockguard_core::Decision>().copied();
            let d = d.expect("no decision in the request");
            let body = format!("{} {} {}", d.allowed, d.shadowed, d.remaining);
            Ok::<_, Infallible>(Response::new(Body::from(body)))
        })
    };
    for (name, layer_shadow) in [("api", true), ("api-limiter-shadow", false)] {
        let limiter = lg.rate_limiter(name, Quota::per_minute(2));
        let shadow = RateLimitLayer::new(limiter.clone().shadow(!layer_shadow), user_key())
            .legacy_headers(true)
            .decision_extension(true)
            .shadow(layer_shadow)
            .layer(seen());
        for _ in 0..2 {
            let res = shadow.clone().oneshot(request(Some("ada"))).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
        }
        let over = shadow.clone().oneshot(request(Some("ada"))).await.unwrap();
        assert_eq!(over.status(), StatusCode::OK, "{name}: let through");
        assert_eq!(
            header(&over, "ratelimit"),
            Some(format!("\"{name}\";r=0;t=30"))
        );
        assert_eq!(header(&over, "x-ratelimit-remaining").as_deref(), Some("0"));
        assert_eq!(header(&over, "retry-after"), None, "{name}: not refused");
        assert_eq!(body_string(over).await, "true true 0", "{name}");
        // The same limiter without shadow mode refuses: the budget was spent.
        let enforced = RateLimitLayer::new(limiter, user_key()).layer(ok_service());
        let refused = enforced.oneshot(request(Some("ada"))).await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{name}");
    }
}

/// The layer answers in the inner service's body type: an admitted
/// response's body is the inner one as it was (no wrapper for a framework
/// to box again), and a refusal's problem body is made into that type.
#[tokio::test(start_paused = true)]
async fn responses_keep_the_inner_body_type() {
    use bytes::Bytes;
    use http_body_util::Full;

    let lg = Client::memory();
    let inner = service_fn(|_req: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let svc = RateLimitLayer::new(lg.rate_limiter("typed", Quota::per_minute(1)), user_key())
        .layer(inner);
    let first: Response<Full<Bytes>> = svc.clone().oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(body_string(first).await, "ok");
    let refused: Response<Full<Bytes>> = svc.oneshot(request(Some("ada"))).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&refused, "content-type").as_deref(),
        Some("application/problem+json")
    );
    assert!(
        body_string(refused).await.contains("\"status\":429"),
        "a refusal keeps its problem body"
    );
}
