//! How connections are made: in plain text, or (feature `tls-rustls`)
//! through rustls, when the URL asks for it (`require_ssl=true`, the
//! driver's parameter) or the builder was given a CA or a client
//! certificate.

use lockguard_core::{Error, Result};

/// What the builder says about TLS, beside the URL.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsSettings {
    /// CA certificates (PEM) to trust instead of the web's roots.
    pub(crate) roots: Option<Vec<u8>>,
    /// A client certificate chain and its key (PEM).
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsSettings {
    fn given(&self) -> bool {
        self.roots.is_some() || self.client.is_some()
    }
}

/// `opts` with TLS as the URL and `tls` ask: unchanged when neither asks
/// for it.
///
/// # Errors
///
/// [`ErrorKind::Unsupported`] when TLS is asked for and the crate was
/// built without `tls-rustls`.
pub(crate) fn apply(opts: mysql_async::Opts, tls: &TlsSettings) -> Result<mysql_async::Opts> {
    if opts.ssl_opts().is_none() && !tls.given() {
        return Ok(opts);
    }
    secure(opts, tls)
}

#[cfg(not(feature = "tls-rustls"))]
fn secure(_opts: mysql_async::Opts, _tls: &TlsSettings) -> Result<mysql_async::Opts> {
    Err(Error::new(
        lockguard_core::ErrorKind::Unsupported,
        "the mysql url asks for TLS (`require_ssl=true`), which needs lockguard-mysql's `tls-rustls` feature (the `lockguard` facade's `tls-rustls`)",
    ))
}

#[cfg(feature = "tls-rustls")]
fn secure(opts: mysql_async::Opts, tls: &TlsSettings) -> Result<mysql_async::Opts> {
    use mysql_async::{ClientIdentity, SslOpts};

    let mut ssl = opts.ssl_opts().cloned().unwrap_or_else(SslOpts::default);
    if let Some(pem) = &tls.roots {
        if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
            return Err(Error::invalid(
                "the mysql TLS root certificate is not PEM (no -----BEGIN line)",
            ));
        }
        ssl = ssl
            .with_root_certs(vec![pem.clone().into()])
            .with_disable_built_in_roots(true);
    }
    if let Some((chain, key)) = &tls.client {
        ssl = ssl.with_client_identity(Some(ClientIdentity::new(
            chain.clone().into(),
            key.clone().into(),
        )));
    }
    Ok(mysql_async::OptsBuilder::from_opts(opts)
        .ssl_opts(ssl)
        .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_unless_asked() {
        let opts = mysql_async::Opts::from_url("mysql://u@h/d").unwrap();
        let same = apply(opts, &TlsSettings::default()).unwrap();
        assert!(same.ssl_opts().is_none());
        let asked = mysql_async::Opts::from_url("mysql://u@h/d?require_ssl=true").unwrap();
        let answer = apply(asked, &TlsSettings::default());
        if cfg!(feature = "tls-rustls") {
            assert!(answer.unwrap().ssl_opts().is_some());
        } else {
            let e = answer.unwrap_err();
            assert!(
                e.is_unsupported() && e.message().contains("tls-rustls"),
                "{e}"
            );
        }
    }
}
