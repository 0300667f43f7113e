//! Certificates for the TLS tests, made with `openssl`.

use std::path::Path;
use std::process::Command;

/// Makes, in `dir`, what a TLS test needs, with the `openssl` command: a
/// private CA (`ca.crt`, `ca.key`), a server certificate for 127.0.0.1
/// (`server.crt`, `server.key`) and a client certificate (`client.crt`,
/// `client.key`), valid for two days.
///
/// # Panics
///
/// When `openssl` is missing or fails.
pub fn make_test_certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the TLS tests need the openssl command (Debian package openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // Extensions make version 3 certificates, which rustls requires.
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=lockguard test CA",
    ]);
    for who in ["server", "client"] {
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{who}.key"),
            "-out",
            &format!("{who}.csr"),
            "-subj",
            &format!("/CN=lockguard test {who}"),
        ]);
        let mut args = vec![
            "x509".to_owned(),
            "-req".into(),
            "-in".into(),
            format!("{who}.csr"),
            "-CA".into(),
            "ca.crt".into(),
            "-CAkey".into(),
            "ca.key".into(),
            "-CAcreateserial".into(),
            "-out".into(),
            format!("{who}.crt"),
            "-days".into(),
            "2".into(),
        ];
        args.extend(["-extfile".into(), format!("{who}.ext")]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args);
    }
}
