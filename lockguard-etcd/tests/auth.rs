//! A cluster with authentication on: the URL's `user:password` connects
//! and takes locks; a wrong password, or none, is refused as
//! `Unauthorized`, and no message repeats the password.

use lockguard_core::{Client, ErrorKind};
use lockguard_etcd::etcd_client;
use lockguard_etcd::testing::EtcdServer;

/// A member with authentication on: `root` (the cluster's administrator)
/// and `app`, whose role may read and write every key.
async fn with_auth() -> EtcdServer {
    let server = EtcdServer::start();
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
    let server = with_auth().await;
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
