//! The one error of the TLS core: each variant names what was wrong.

/// What went wrong generating, reading or using TLS material.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot generate {what}: {source}")]
    Generate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("{what} holds no PEM certificate")]
    NoCertificate { what: &'static str },
    #[error("{what} holds no PEM private key")]
    NoKey { what: &'static str },
    #[error("{what} is not a readable X.509 certificate: {reason}")]
    BadCertificate { what: &'static str, reason: String },
    #[error("{what} is not a usable private key: {reason}")]
    BadKey { what: &'static str, reason: String },
    #[error("the CA certificate is not a CA (basicConstraints CA:TRUE is missing)")]
    NotCa,
    #[error("the private key does not match {what}")]
    KeyMismatch { what: &'static str },
    #[error("the CA expired at {not_after}; it cannot issue at {now}")]
    CaExpired {
        not_after: jiff::Timestamp,
        now: jiff::Timestamp,
    },
    #[error(
        "no valid period: notBefore {not_before} is not before notAfter {not_after} (is the CA not valid yet?)"
    )]
    EmptyValidity {
        not_before: jiff::Timestamp,
        not_after: jiff::Timestamp,
    },
    #[error("{0} cannot be written in a certificate")]
    TimeOutOfRange(jiff::Timestamp),
    #[error("a certificate for {0:?} needs at least one DNS name")]
    NoNames(String),
    #[error("{what}: {source}")]
    Rustls {
        what: &'static str,
        #[source]
        source: rustls::Error,
    },
    #[error("the trust bundle is unusable: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("{0:?} is not a valid server name")]
    ServerName(String),
    #[error("{addr}: {what}: {source}")]
    Io {
        addr: std::net::SocketAddr,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{addr}: the server answered {answer:?} to the SSLRequest instead of 'S' (TLS off?)")]
    SslRefused {
        addr: std::net::SocketAddr,
        answer: char,
    },
    #[error("{addr}: no answer within {seconds} s")]
    Timeout {
        addr: std::net::SocketAddr,
        seconds: u64,
    },
    #[error("{addr}: the server presented no certificate")]
    NoPeerCertificate { addr: std::net::SocketAddr },
}
