//! A cluster with authentication on: the URL's `user:password` connects
//! and takes locks; a wrong password, or none, is refused as
//! `Unauthorized`, and no message repeats the password; a token that
//! expired while the client was idle is replaced.

use lockguard_core::{Client, ErrorKind};
use lockguard_etcd::etcd_client;
use lockguard_etcd::testing::EtcdServer;

/// A member with authentication on (and more of etcd's `flags`): `root`
/// (the cluster's administrator) and `app`, whose role may read and write
/// every key.
async fn with_auth(flags: &[&str]) -> EtcdServer {
    let server = EtcdServer::start_with_flags(flags);
    let mut admin = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .expect("connect the admin client");
    admin.user_add("root", "rootpw", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.role_add("app").await.unwrap();
    admin
        .role_grant_permission(
            "app",
            etcd_client::Permission::read_write("").with_all_keys(),
        )
        .await
        .unwrap();
    admin.user_add("app", "s3cret", None).await.unwrap();
    admin.user_grant_role("app", "app").await.unwrap();
    admin.auth_enable().await.unwrap();
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_credentials_in_the_url_authenticate() {
    let server = with_auth(&[]).await;
    let url = format!("etcd://app:s3cret@{}", server.endpoint());
    let lg = lockguard_etcd::url::from_url(Client::builder(), &url)
        .await
        .expect("connect with the URL's credentials");
    let guard = lg.lock("order:1").acquire().await.unwrap();
    assert_eq!(lg.counter("n").incr_by(2).await.unwrap(), 2);
    assert!(guard.release().await.unwrap());

    let wrong = format!("etcd://app:wrongpw@{}", server.endpoint());
    let err = lockguard_etcd::url::from_url(Client::builder(), &wrong)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(!err.to_string().contains("wrongpw"), "{err}");

    let none = format!("etcd://{}", server.endpoint());
    let err = lockguard_etcd::url::from_url(Client::builder(), &none)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
}

/// etcd forgets a token its holder has not used for `--auth-token-ttl`
/// (here 1 s; 300 s by default): a client idle for longer asks for a new
/// one with its credentials, and its next lock and counter go through. A
/// plain `etcd-client` client without token refresh, idle as long, is
/// refused: the token did expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_an_expired_token_is_replaced() {
    let server = with_auth(&["--auth-token-ttl=1"]).await;
    let url = format!("etcd://app:s3cret@{}", server.endpoint());
    let lg = lockguard_etcd::url::from_url(Client::builder(), &url)
        .await
        .expect("connect with the URL's credentials");
    let guard = lg.lock("token").acquire().await.unwrap();
    assert!(guard.release().await.unwrap());
    let mut plain = etcd_client::Client::connect(
        [server.endpoint()],
        Some(etcd_client::ConnectOptions::new().with_user("app", "s3cret")),
    )
    .await
    .expect("connect the plain client");
    plain.get("k", None).await.expect("a fresh token works");
    // etcd looks for expired tokens once a second.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let refused = plain
        .get("k", None)
        .await
        .expect_err("the plain client's token expired");
    assert!(
        refused.to_string().contains("invalid auth token"),
        "{refused}"
    );
    let guard = lg
        .lock("token")
        .acquire()
        .await
        .expect("a lock after the token expired");
    assert_eq!(lg.counter("token:n").incr_by(1).await.unwrap(), 1);
    assert!(guard.release().await.unwrap());
}
