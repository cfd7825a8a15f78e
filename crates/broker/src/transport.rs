//! A connection's byte stream: plain TCP, or TLS over TCP for SSL and SASL_SSL listeners.
//!
//! Reading is the same for both ([`AsyncRead`]). Writing is [`crate::outbound::write`]'s: on
//! plain TCP, record bytes go from segment files to the socket with `sendfile`; under TLS they
//! must be encrypted in user space, so the frame is copied into the TLS stream (kernel TLS,
//! which would let `sendfile` carry them again, is a later step).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// A client connection's stream.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    /// Boxed: a TLS session is large, and most connections are plain.
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}
