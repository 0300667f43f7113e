//! How connections are made: in plain text, or (feature `tls-rustls`)
//! through rustls, for the pool, the listening connection and the
//! deployment check alike.

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Config, Socket};

use lockguard_core::Result;

/// The TLS settings of a builder.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsSettings {
    /// PEM certificates to trust instead of the system's roots.
    #[cfg(feature = "tls-rustls")]
    pub(crate) roots: Option<Vec<u8>>,
    /// A PEM certificate chain and its key, for servers that ask.
    #[cfg(feature = "tls-rustls")]
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

/// Makes the connections.
#[derive(Clone)]
pub(crate) enum Connector {
    /// Plain text (without the `tls-rustls` feature, or `sslmode=disable`).
    Plain,
    /// Through rustls; the URL's `sslmode` still decides whether TLS is
    /// tried (`prefer`), needed (`require`) or not used (`disable`).
    #[cfg(feature = "tls-rustls")]
    Rustls(tokio_postgres_rustls::MakeRustlsConnect),
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connector::Plain => "Plain",
            #[cfg(feature = "tls-rustls")]
            Connector::Rustls(_) => "Rustls",
        })
    }
}

/// A notification: channel and payload.
pub(crate) type Note = (String, String);

impl Connector {
    /// The connector for `settings` and the connections of `config`:
    /// rustls when the feature is on, unless the URL says
    /// `sslmode=disable`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for certificates that cannot be read.
    #[cfg_attr(not(feature = "tls-rustls"), allow(clippy::unnecessary_wraps))]
    pub(crate) fn new(settings: &TlsSettings, config: &Config) -> Result<Self> {
        if config.get_ssl_mode() == tokio_postgres::config::SslMode::Disable {
            return Ok(Connector::Plain);
        }
        // A unix socket carries no TLS (as with libpq, whatever sslmode
        // says), and tokio-postgres would ask rustls for a connector to an
        // empty host name, which it refuses.
        #[cfg(unix)]
        if !config.get_hosts().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| matches!(h, tokio_postgres::config::Host::Unix(_)))
        {
            return Ok(Connector::Plain);
        }
        #[cfg(feature = "tls-rustls")]
        {
            rustls_connector(settings).map(Connector::Rustls)
        }
        #[cfg(not(feature = "tls-rustls"))]
        {
            let _ = settings;
            Ok(Connector::Plain)
        }
    }

    /// A pool manager making its connections this way.
    pub(crate) fn manager(
        &self,
        config: Config,
        manager: deadpool_postgres::ManagerConfig,
    ) -> deadpool_postgres::Manager {
        match self {
            Connector::Plain => {
                deadpool_postgres::Manager::from_config(config, tokio_postgres::NoTls, manager)
            }
            #[cfg(feature = "tls-rustls")]
            Connector::Rustls(tls) => {
                deadpool_postgres::Manager::from_config(config, tls.clone(), manager)
            }
        }
    }

    /// Asks the server to cancel the statement running on the connection
    /// of `token` (a connection of its own, made this way).
    pub(crate) async fn cancel(
        &self,
        token: &tokio_postgres::CancelToken,
    ) -> std::result::Result<(), tokio_postgres::Error> {
        match self {
            Connector::Plain => token.cancel_query(tokio_postgres::NoTls).await,
            #[cfg(feature = "tls-rustls")]
            Connector::Rustls(tls) => token.cancel_query(tls.clone()).await,
        }
    }

    /// A connection whose notifications come on the returned channel; its
    /// driving task ends when the connection does.
    pub(crate) async fn connect_listening(
        &self,
        config: &Config,
    ) -> std::result::Result<
        (
            tokio_postgres::Client,
            mpsc::UnboundedReceiver<Note>,
            JoinHandle<()>,
        ),
        tokio_postgres::Error,
    > {
        match self {
            Connector::Plain => drive(config, tokio_postgres::NoTls).await,
            #[cfg(feature = "tls-rustls")]
            Connector::Rustls(tls) => drive(config, tls.clone()).await,
        }
    }
}

/// Connects with `tls` and drives the connection in a task of its own,
/// forwarding notifications.
async fn drive<T>(
    config: &Config,
    tls: T,
) -> std::result::Result<
    (
        tokio_postgres::Client,
        mpsc::UnboundedReceiver<Note>,
        JoinHandle<()>,
    ),
    tokio_postgres::Error,
>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let (client, mut connection) = config.connect(tls).await?;
    let (notes_tx, notes) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if notes_tx
                        .send((n.channel().to_owned(), n.payload().to_owned()))
                        .is_err()
                    {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "postgres connection lost");
                    return;
                }
                None => return,
            }
        }
    });
    Ok((client, notes, driver))
}

#[cfg(feature = "tls-rustls")]
fn rustls_connector(settings: &TlsSettings) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    use lockguard_core::{Error, ErrorKind};
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let bad = |what: &str, e: &dyn std::fmt::Display| {
        Error::new(ErrorKind::InvalidInput, format!("{what}: {e}"))
    };
    let mut roots = rustls::RootCertStore::empty();
    match &settings.roots {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| bad("tls_root_certificate is not PEM", &e))?;
                roots
                    .add(cert)
                    .map_err(|e| bad("tls_root_certificate", &e))?;
            }
            if roots.is_empty() {
                return Err(bad("tls_root_certificate", &"no certificate in it"));
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for cert in native.certs {
                // One unreadable system certificate does not stop the rest.
                let _ = roots.add(cert);
            }
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("TLS versions", &e))?
        .with_root_certificates(roots);
    let config = match &settings.client {
        Some((chain, key)) => {
            let chain = CertificateDer::pem_slice_iter(chain)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| bad("tls_client_certificate's chain is not PEM", &e))?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| bad("tls_client_certificate's key is not PEM", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad("tls_client_certificate", &e))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}
