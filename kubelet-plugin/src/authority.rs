//! kubelet's `:authority`, made acceptable to h2 before h2 reads it.
//!
//! kubelet dials its plugins' unix sockets by path (`grpc.DialContext(ctx, socketPath, …)` with
//! a context dialer and no `grpc.WithAuthority`: the plugin watcher in
//! `pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go`, the DRA client in
//! `pkg/kubelet/cm/dra/plugin/dra_plugin.go`; the device plugin client of kubelets before
//! kubernetes#112597). grpc-go then sends the socket path as the HTTP/2 `:authority`: raw
//! (`/var/lib/kubelet/…`) before grpc-go 1.54, percent-encoded (`%2Fvar%2Flib%2Fkubelet%2F…`)
//! since. Neither is a URI authority, and h2 (under tonic and hyper) resets every such stream with
//! `PROTOCOL_ERROR` before the service sees it (hyperium/h2#487, still open), so registration
//! never completes.
//!
//! [`Normalised`] sits between each accepted unix stream and h2 and rewrites the client's header
//! blocks: an `:authority` that is not a valid URI authority (a path, an encoded path, empty)
//! becomes `localhost`, what grpc-go sends for `unix:` targets and what kubelet's other clients
//! set; every other header, and every other frame, passes unchanged. This keeps the stock h2 (its
//! fixes keep coming with `cargo update`) instead of carrying a patched copy of a crate that
//! parses untrusted input, and it touches only the kubelet-facing sockets.
//!
//! How: the client→server bytes are split into HTTP/2 frames. A HEADERS frame and its
//! CONTINUATIONs are decoded with an HPACK decoder that follows the client's dynamic table, and
//! re-encoded as literals without indexing, so h2's decoder never needs a dynamic table entry
//! and stays consistent whatever the client's encoder does. The server→client direction is not
//! touched. Padding is dropped (it carries nothing); priority is kept.
//!
//! Limits, those of the h2 server we serve with (set explicitly in [`server`]): frames up to
//! [`MAX_FRAME_SIZE`], decoded header lists up to [`MAX_HEADER_LIST_SIZE`], and the HPACK
//! dynamic table at the protocol default [`HEADER_TABLE_SIZE`] (h2 advertises no other). A
//! connection beyond them, or whose header block does not decode, is closed (an error from
//! `read`), as h2 closes one whose HPACK does not decode.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest frame payload the servers accept (h2's `SETTINGS_MAX_FRAME_SIZE`).
pub const MAX_FRAME_SIZE: u32 = 16 * 1024;
/// The largest decoded header list the servers accept (`SETTINGS_MAX_HEADER_LIST_SIZE`).
pub const MAX_HEADER_LIST_SIZE: u32 = 16 * 1024;
/// The HPACK dynamic table size h2 advertises (the protocol's default: it sends none).
pub const HEADER_TABLE_SIZE: usize = 4096;
/// A header block (HEADERS + CONTINUATIONs, encoded) larger than this closes the connection.
const MAX_HEADER_BLOCK: usize = 4 * MAX_HEADER_LIST_SIZE as usize;
/// What an unusable `:authority` becomes.
pub const LOCALHOST: &[u8] = b"localhost";

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
const FRAME_HEADER: usize = 9;

/// Whether h2 accepts `value` as `:authority` (the same parser h2 uses).
pub fn acceptable(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// A HEADERS frame whose block goes on in CONTINUATION frames.
struct Pending {
    stream: u32,
    flags: u8,
    priority: Option<[u8; 5]>,
    block: Vec<u8>,
}

/// The rewriting of one connection's client→server bytes (no I/O: see [`Normalised`]).
pub struct Rewriter {
    decoder: loona_hpack::Decoder<'static>,
    preface_seen: bool,
    /// Not HTTP/2 with prior knowledge: bytes pass unchanged (h2 refuses them itself).
    passthrough: bool,
    pending: Option<Pending>,
    /// Bytes received and not yet processed (an incomplete frame).
    input: Vec<u8>,
    /// Bytes ready for h2.
    output: Vec<u8>,
    /// Every request's `:authority` set to this instead (a test client's way of sending what
    /// kubelet sends: [`Rewriter::setting_authority`]).
    forced: Option<Vec<u8>>,
}

impl Default for Rewriter {
    fn default() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        Rewriter {
            decoder,
            preface_seen: false,
            passthrough: false,
            pending: None,
            input: Vec::new(),
            output: Vec::new(),
            forced: None,
        }
    }
}

fn invalid(why: String) -> io::Error {
    tracing::warn!("kubelet-facing gRPC connection closed: {why}");
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl Rewriter {
    /// A rewriter that sets every request's `:authority` to `value`, whatever it was: put on a
    /// client's outgoing bytes, it makes that client send what kubelet's grpc-go sends (the test
    /// stand-ins use it; tonic's own client can only send a valid authority).
    pub fn setting_authority(value: &[u8]) -> Rewriter {
        Rewriter {
            forced: Some(value.to_vec()),
            ..Rewriter::default()
        }
    }

    /// Takes `bytes` from the client; what is ready for h2 is in [`Rewriter::take`].
    pub fn feed(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.passthrough {
            self.output.extend_from_slice(bytes);
            return Ok(());
        }
        self.input.extend_from_slice(bytes);
        if !self.preface_seen {
            let n = self.input.len().min(PREFACE.len());
            if self.input[..n] != PREFACE[..n] {
                self.passthrough = true;
                self.output.append(&mut self.input);
                return Ok(());
            }
            if n < PREFACE.len() {
                return Ok(());
            }
            self.output.extend_from_slice(PREFACE);
            self.input.drain(..PREFACE.len());
            self.preface_seen = true;
        }
        let mut input = std::mem::take(&mut self.input);
        let used = self.frames(&input)?;
        input.drain(..used);
        self.input = input;
        Ok(())
    }

    /// Processes the complete frames at the start of `input`; returns the bytes they took.
    fn frames(&mut self, input: &[u8]) -> io::Result<usize> {
        let mut at = 0;
        while let Some(head) = input.get(at..at + FRAME_HEADER) {
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            if len > MAX_FRAME_SIZE as usize {
                return Err(invalid(format!(
                    "a frame of {len} bytes, above the {MAX_FRAME_SIZE} this server accepts"
                )));
            }
            let Some(payload) = input.get(at + FRAME_HEADER..at + FRAME_HEADER + len) else {
                break;
            };
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            match (kind, self.pending.is_some()) {
                (HEADERS, false) => self.headers(stream, flags, payload)?,
                (CONTINUATION, true) => self.continuation(stream, flags, payload)?,
                (_, true) => {
                    return Err(invalid(format!(
                        "frame type {kind} inside a header block (RFC 9113 §6.10)"
                    )))
                }
                (_, false) => self
                    .output
                    .extend_from_slice(&input[at..at + FRAME_HEADER + len]),
            }
            at += FRAME_HEADER + len;
        }
        Ok(at)
    }

    /// The bytes ready for h2, taken.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// At the client's end of stream: what was left incomplete goes to h2 as it is (h2 reports
    /// the truncation).
    pub fn finish(&mut self) -> Vec<u8> {
        self.output.append(&mut self.input);
        self.take()
    }

    fn headers(&mut self, stream: u32, flags: u8, payload: &[u8]) -> io::Result<()> {
        let short = || {
            invalid(format!(
                "HEADERS on stream {stream}: shorter than its padding or priority"
            ))
        };
        let mut body = payload;
        let mut pad = 0;
        if flags & PADDED != 0 {
            let (&p, rest) = body.split_first().ok_or_else(short)?;
            pad = usize::from(p);
            body = rest;
        }
        let mut priority = None;
        if flags & PRIORITY != 0 {
            let (p, rest) = body.split_first_chunk::<5>().ok_or_else(short)?;
            priority = Some(*p);
            body = rest;
        }
        let fragment = body
            .get(..body.len().checked_sub(pad).ok_or_else(short)?)
            .ok_or_else(short)?;
        self.pending = Some(Pending {
            stream,
            flags,
            priority,
            block: fragment.to_vec(),
        });
        if flags & END_HEADERS != 0 {
            self.complete()?;
        }
        Ok(())
    }

    fn continuation(&mut self, stream: u32, flags: u8, payload: &[u8]) -> io::Result<()> {
        let Some(p) = self.pending.as_mut() else {
            return Ok(());
        };
        if p.stream != stream {
            return Err(invalid(format!(
                "CONTINUATION on stream {stream} inside stream {}'s header block",
                p.stream
            )));
        }
        if p.block.len() + payload.len() > MAX_HEADER_BLOCK {
            return Err(invalid(format!(
                "a header block above {MAX_HEADER_BLOCK} bytes on stream {stream}"
            )));
        }
        p.block.extend_from_slice(payload);
        if flags & END_HEADERS != 0 {
            self.complete()?;
        }
        Ok(())
    }

    /// The pending header block, decoded, its `:authority` made acceptable, re-encoded as
    /// HEADERS (+ CONTINUATION) frames into the output.
    fn complete(&mut self) -> io::Result<()> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        let fields = self.decode(p.stream, &p.block)?;
        let mut block = Vec::with_capacity(p.block.len() + 64);
        for (name, value) in &fields {
            let value = match &self.forced {
                Some(forced) if name == b":authority" => forced.as_slice(),
                None if name == b":authority" && !acceptable(value) => {
                    tracing::debug!(
                        authority = %String::from_utf8_lossy(value),
                        "kubelet's :authority replaced by localhost"
                    );
                    LOCALHOST
                }
                _ => value.as_slice(),
            };
            literal(&mut block, name, value);
        }
        let mut payload = Vec::with_capacity(block.len() + 5);
        if let Some(priority) = p.priority {
            payload.extend_from_slice(&priority);
        }
        payload.extend_from_slice(&block);
        let mut chunks = payload.chunks(MAX_FRAME_SIZE as usize).peekable();
        let mut kind = HEADERS;
        let mut flags = p.flags & (END_STREAM | PRIORITY);
        while let Some(chunk) = chunks.next() {
            if chunks.peek().is_none() {
                flags |= END_HEADERS;
            }
            frame(&mut self.output, kind, flags, p.stream, chunk);
            kind = CONTINUATION;
            flags = 0;
        }
        if payload.is_empty() {
            frame(
                &mut self.output,
                HEADERS,
                flags | END_HEADERS,
                p.stream,
                &[],
            );
        }
        Ok(())
    }

    fn decode(&mut self, stream: u32, block: &[u8]) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut fields = Vec::new();
        let mut size = 0usize;
        self.decoder
            .decode_with_cb(block, |name, value| {
                // RFC 7541 §4.1 entry size, as SETTINGS_MAX_HEADER_LIST_SIZE counts it.
                size += name.len() + value.len() + 32;
                if size <= MAX_HEADER_LIST_SIZE as usize {
                    fields.push((name.into_owned(), value.into_owned()));
                }
            })
            .map_err(|e| {
                invalid(format!(
                    "header block of stream {stream} does not decode: {e:?}"
                ))
            })?;
        if size > MAX_HEADER_LIST_SIZE as usize {
            return Err(invalid(format!(
                "header list of {size} bytes on stream {stream}, above {MAX_HEADER_LIST_SIZE}"
            )));
        }
        Ok(fields)
    }
}

/// A literal header field without indexing, new name, no Huffman (RFC 7541 §6.2.2).
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    for s in [name, value] {
        // Writing to a Vec cannot fail.
        let _ = loona_hpack::encoder::encode_integer_into(s.len(), 7, 0, out);
        out.extend_from_slice(s);
    }
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len())
        .unwrap_or(u32::MAX)
        .to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A connection whose client→server bytes go through a [`Rewriter`].
pub struct Normalised<S> {
    inner: S,
    rewriter: Rewriter,
    /// Rewritten bytes not yet handed to h2.
    ready: Vec<u8>,
    at: usize,
    eof: bool,
    scratch: Box<[u8]>,
}

impl<S> Normalised<S> {
    /// Wraps an accepted connection.
    pub fn new(inner: S) -> Self {
        Normalised {
            inner,
            rewriter: Rewriter::default(),
            ready: Vec::new(),
            at: 0,
            eof: false,
            scratch: vec![0; MAX_FRAME_SIZE as usize].into_boxed_slice(),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Normalised<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.at);
                buf.put_slice(&this.ready[this.at..this.at + n]);
                this.at += n;
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut rb = ReadBuf::new(&mut this.scratch);
            std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            if rb.filled().is_empty() {
                this.eof = true;
                this.ready = this.rewriter.finish();
            } else {
                this.rewriter.feed(rb.filled())?;
                this.ready = this.rewriter.take();
            }
            this.at = 0;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Normalised<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: Connected> Connected for Normalised<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The connections of `listener`, each [`Normalised`]: what the kubelet-facing servers serve.
pub fn incoming(
    listener: UnixListener,
) -> impl Stream<Item = io::Result<Normalised<UnixStream>>> + Send + 'static {
    UnixListenerStream::new(listener).map(|c| c.map(Normalised::new))
}

/// A gRPC server builder with the HTTP/2 limits [`Normalised`] assumes.
pub fn server() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .max_frame_size(MAX_FRAME_SIZE)
        .http2_max_header_list_size(MAX_HEADER_LIST_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    fn request(authority: &[u8]) -> Fields {
        [
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", b"/pluginregistration.Registration/GetInfo"),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
        .iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect()
    }

    /// `block` as a HEADERS frame (+ CONTINUATIONs of at most `max` bytes) on `stream`.
    fn header_frames(block: &[u8], stream: u32, flags: u8, max: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let chunks: Vec<&[u8]> = block.chunks(max).collect();
        for (i, c) in chunks.iter().enumerate() {
            let mut f = if i == 0 { flags } else { 0 };
            if i + 1 == chunks.len() {
                f |= END_HEADERS;
            }
            frame(
                &mut out,
                if i == 0 { HEADERS } else { CONTINUATION },
                f,
                stream,
                c,
            );
        }
        out
    }

    /// The frames in `bytes` (after the preface): (type, flags, stream, payload).
    fn parse(bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        assert_eq!(&bytes[..24], PREFACE);
        let mut at = 24;
        let mut out = Vec::new();
        while at < bytes.len() {
            let h = &bytes[at..at + 9];
            let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]);
            out.push((h[3], h[4], stream, bytes[at + 9..at + 9 + len].to_vec()));
            at += 9 + len;
        }
        out
    }

    /// What h2 would decode from the rewritten bytes: per header block, its fields.
    fn decoded(bytes: &[u8]) -> Vec<Fields> {
        let mut d = loona_hpack::Decoder::new();
        let mut blocks = Vec::new();
        let mut block = Vec::new();
        for (kind, flags, _, payload) in parse(bytes) {
            match kind {
                HEADERS => {
                    assert_eq!(flags & PADDED, 0);
                    let skip = if flags & PRIORITY != 0 { 5 } else { 0 };
                    block = payload[skip..].to_vec();
                }
                CONTINUATION => block.extend_from_slice(&payload),
                _ => continue,
            }
            if flags & END_HEADERS != 0 {
                blocks.push(d.decode(&block).unwrap());
            }
        }
        blocks
    }

    fn rewrite_in_pieces(bytes: &[u8], piece: usize) -> io::Result<Vec<u8>> {
        let mut r = Rewriter::default();
        let mut out = Vec::new();
        for p in bytes.chunks(piece) {
            r.feed(p)?;
            out.extend(r.take());
        }
        out.extend(r.finish());
        Ok(out)
    }

    #[test]
    fn kubelets_authorities_become_localhost_and_valid_ones_stay() {
        for (given, want) in [
            (
                &b"/var/lib/kubelet/plugins_registry/gpuslice.io-reg.sock"[..],
                LOCALHOST,
            ),
            (
                b"%2Fvar%2Flib%2Fkubelet%2Fplugins%2Fgpuslice.io%2Fdra.sock",
                LOCALHOST,
            ),
            (
                b"unix:/var/lib/kubelet/device-plugins/gpuslice.sock",
                LOCALHOST,
            ),
            (b"", LOCALHOST),
            (b"localhost", b"localhost"),
            (b"gpuslice.io:443", b"gpuslice.io:443"),
        ] {
            let mut enc = loona_hpack::Encoder::new();
            let fields = request(given);
            let block = enc.encode(fields.iter().map(|(n, v)| (&n[..], &v[..])));
            let mut bytes = PREFACE.to_vec();
            frame(&mut bytes, 0x4, 0, 0, &[]); // SETTINGS
            bytes.extend(header_frames(&block, 1, 0, 16));
            frame(&mut bytes, 0x0, END_STREAM, 1, b"\0\0\0\0\0"); // DATA
                                                                  // The same request again: the client's encoder now refers to its dynamic table.
            let again = enc.encode(fields.iter().map(|(n, v)| (&n[..], &v[..])));
            assert!(
                again.len() < block.len(),
                "the second block uses the dynamic table"
            );
            bytes.extend(header_frames(
                &again,
                3,
                END_STREAM,
                MAX_FRAME_SIZE as usize,
            ));
            let out = rewrite_in_pieces(&bytes, 7).unwrap();
            let mut expect = request(want);
            expect.sort();
            for mut fields in decoded(&out) {
                fields.sort();
                assert_eq!(fields, expect, "{}", String::from_utf8_lossy(given));
            }
            let frames = parse(&out);
            let kinds: Vec<(u8, u8, u32)> = frames.iter().map(|f| (f.0, f.1, f.2)).collect();
            assert_eq!(
                kinds,
                [
                    (0x4, 0, 0),
                    (HEADERS, END_HEADERS, 1),
                    (0x0, END_STREAM, 1),
                    (HEADERS, END_HEADERS | END_STREAM, 3)
                ]
            );
            assert_eq!(frames[0].3, b"", "SETTINGS unchanged");
            assert_eq!(frames[2].3, b"\0\0\0\0\0", "DATA unchanged");
        }
    }

    #[test]
    fn a_forced_authority_replaces_any() {
        let block = loona_hpack::Encoder::new()
            .encode(request(b"localhost").iter().map(|(n, v)| (&n[..], &v[..])));
        let mut bytes = PREFACE.to_vec();
        bytes.extend(header_frames(&block, 1, END_STREAM, 100));
        let mut r = Rewriter::setting_authority(b"%2Frun%2Fx.sock");
        r.feed(&bytes).unwrap();
        let mut want = request(b"%2Frun%2Fx.sock");
        want.sort();
        let mut got = decoded(&r.take()).remove(0);
        got.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn padding_is_dropped_priority_kept_and_continuations_joined() {
        let mut fields = request(b"/run/x.sock");
        // Near the header list limit: the block spans three frames from the client.
        let big = vec![b'v'; MAX_HEADER_LIST_SIZE as usize - 400];
        fields.push((b"x-big".to_vec(), big));
        let block =
            loona_hpack::Encoder::new().encode(fields.iter().map(|(n, v)| (&n[..], &v[..])));
        let mut payload = vec![3]; // pad length
        payload.extend_from_slice(&[0, 0, 0, 0, 15]); // priority: no dependency, weight 16
        payload.extend_from_slice(&block[..100]);
        payload.extend_from_slice(&[0, 0, 0]);
        let mut bytes = PREFACE.to_vec();
        frame(&mut bytes, HEADERS, PADDED | PRIORITY, 5, &payload);
        let rest: Vec<&[u8]> = block[100..].chunks(8000).collect();
        for (i, c) in rest.iter().enumerate() {
            let flags = if i + 1 == rest.len() { END_HEADERS } else { 0 };
            frame(&mut bytes, CONTINUATION, flags, 5, c);
        }
        let out = rewrite_in_pieces(&bytes, 4096).unwrap();
        let frames = parse(&out);
        assert!(frames.iter().all(|f| f.3.len() <= MAX_FRAME_SIZE as usize));
        assert_eq!(frames.len(), 1, "one HEADERS frame: the block fits");
        assert_eq!(
            (frames[0].0, frames[0].1),
            (HEADERS, PRIORITY | END_HEADERS)
        );
        assert_eq!(&frames[0].3[..5], &[0, 0, 0, 0, 15]);
        let mut want = request(LOCALHOST);
        want.push((
            b"x-big".to_vec(),
            vec![b'v'; MAX_HEADER_LIST_SIZE as usize - 400],
        ));
        want.sort();
        let mut got = decoded(&out).remove(0);
        got.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn what_h2_would_refuse_closes_the_connection() {
        let block = loona_hpack::Encoder::new().encode([(&b":authority"[..], &b"/x"[..])]);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("undecodable block", {
                let mut b = PREFACE.to_vec();
                frame(
                    &mut b,
                    HEADERS,
                    END_HEADERS,
                    1,
                    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                );
                b
            }),
            ("CONTINUATION of another stream", {
                let mut b = PREFACE.to_vec();
                frame(&mut b, HEADERS, 0, 1, &block[..1]);
                frame(&mut b, CONTINUATION, END_HEADERS, 3, &block[1..]);
                b
            }),
            ("DATA inside a header block", {
                let mut b = PREFACE.to_vec();
                frame(&mut b, HEADERS, 0, 1, &block[..1]);
                frame(&mut b, 0x0, 0, 1, b"x");
                b
            }),
            ("frame above the maximum", {
                let mut b = PREFACE.to_vec();
                b.extend_from_slice(&[0x01, 0x00, 0x00, 0x0, 0, 0, 0, 0, 1]);
                b
            }),
            ("padding longer than the frame", {
                let mut b = PREFACE.to_vec();
                frame(&mut b, HEADERS, END_HEADERS | PADDED, 1, &[9, 0x82]);
                b
            }),
            ("header list above the maximum", {
                let big = vec![b'v'; MAX_HEADER_LIST_SIZE as usize];
                let blk = loona_hpack::Encoder::new().encode([(&b"x-big"[..], &big[..])]);
                let mut b = PREFACE.to_vec();
                b.extend(header_frames(&blk, 1, 0, MAX_FRAME_SIZE as usize));
                b
            }),
            ("dynamic table above the advertised size", {
                let mut b = PREFACE.to_vec();
                // Dynamic table size update to 8192, then :method GET.
                frame(&mut b, HEADERS, END_HEADERS, 1, &[0x3f, 0xe1, 0x3f, 0x82]);
                b
            }),
        ];
        for (what, bytes) in cases {
            let err = rewrite_in_pieces(&bytes, 5).expect_err(what);
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{what}: {err}");
        }
    }

    #[test]
    fn what_is_not_http2_with_prior_knowledge_passes_unchanged() {
        let http1 = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(rewrite_in_pieces(http1, 3).unwrap(), http1);
        // A truncated frame at the end goes to h2 as it is.
        let mut b = PREFACE.to_vec();
        b.extend_from_slice(&[0, 0, 5, 0, 0, 0, 0, 0, 1, b'a']);
        assert_eq!(rewrite_in_pieces(&b, 2).unwrap(), b);
    }
}
