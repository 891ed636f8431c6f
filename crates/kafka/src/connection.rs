//! One TCP connection to one broker: framing, correlation, negotiated versions.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::buffers::Buffers;
use crate::error::{Error, Result};

/// Frames larger than this are refused: a corrupt length must not allocate gigabytes.
const MAX_FRAME: usize = 128 * 1024 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's deadline unless the owner sets another.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Connection {
    addr: String,
    stream: TcpStream,
    client_id: String,
    correlation_id: i32,
    /// Broker's supported `(min, max)` per API key.
    versions: BTreeMap<i16, (i16, i16)>,
    /// How long one request may take, answer included.
    timeout: Duration,
    /// An exchange started and not finished: its caller gave up (a timeout, or a dropped
    /// future), and its answer may still arrive. The connection is then unusable.
    broken: bool,
    /// Large answers' buffers, read into again once their records are gone.
    buffers: Buffers,
}

impl Connection {
    /// Connects and negotiates versions with ApiVersions.
    pub async fn connect(addr: &str, client_id: &str) -> Result<Connection> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| Error::Timeout(CONNECT_TIMEOUT))?
            .map_err(|source| Error::Connect {
                addr: addr.to_owned(),
                source,
            })?;
        stream.set_nodelay(true).ok();
        let mut conn = Connection {
            addr: addr.to_owned(),
            stream,
            client_id: client_id.to_owned(),
            correlation_id: 0,
            versions: BTreeMap::new(),
            timeout: CONNECT_TIMEOUT,
            broken: false,
            buffers: Buffers::default(),
        };
        // Version 0 is understood by every broker; it lists what the broker supports.
        let resp = conn.send_at(&ApiVersionsRequest::default(), 0).await?;
        crate::error::check(ApiKey::ApiVersions, resp.error_code)?;
        conn.versions = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        conn.timeout = DEFAULT_REQUEST_TIMEOUT;
        Ok(conn)
    }

    /// Every later request fails with [`Error::Timeout`] past `timeout`; the connection is
    /// then unusable (a late answer would be misread) and must be dropped.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The highest version of `R` both sides support.
    pub fn version_for<R: Request>(&self) -> Result<i16> {
        let api = api_key(R::KEY);
        let ours = R::VERSIONS;
        let &(min, max) = self
            .versions
            .get(&R::KEY)
            .ok_or_else(|| Error::Unsupported {
                api,
                ours: format!("{}..{}", ours.min, ours.max),
                theirs: "none".into(),
            })?;
        let v = ours.max.min(max);
        if v < ours.min.max(min) {
            return Err(Error::Unsupported {
                api,
                ours: format!("{}..{}", ours.min, ours.max),
                theirs: format!("{min}..{max}"),
            });
        }
        Ok(v)
    }

    /// Sends a request at the negotiated version and waits for its response.
    pub async fn send<R: Request>(&mut self, req: &R) -> Result<R::Response> {
        let version = self.version_for::<R>()?;
        self.send_at(req, version).await
    }

    /// As [`Connection::send`], but at most version `cap` (for requests whose newer versions
    /// need fields this client does not fill, such as topic ids).
    pub async fn send_capped<R: Request>(&mut self, req: &R, cap: i16) -> Result<R::Response> {
        let version = self.version_for::<R>()?.min(cap);
        self.send_at(req, version).await
    }

    async fn send_at<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response> {
        if self.broken {
            return Err(Error::Io {
                addr: self.addr.clone(),
                source: std::io::Error::other("an earlier request was abandoned mid-exchange"),
            });
        }
        // Cleared only when the answer has been read whole: a cancelled exchange leaves it set.
        self.broken = true;
        let timeout = self.timeout;
        let result = tokio::time::timeout(timeout, self.exchange(req, version))
            .await
            .map_err(|_| Error::Timeout(timeout))?;
        match &result {
            Err(Error::Io { .. }) => {}
            Err(Error::Protocol(m)) if m.contains("arrived for request") => {}
            _ => self.broken = false,
        }
        result
    }

    /// Whether the connection must be dropped (an exchange on it was abandoned or failed).
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    async fn exchange<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response> {
        let api = api_key(R::KEY);
        let codec = |e: anyhow::Error| Error::Codec {
            api,
            message: format!("{e:#}"),
        };
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let correlation_id = self.correlation_id;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, R::header_version(version))
            .map_err(codec)?;
        req.encode(&mut body, version).map_err(codec)?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_u32(body.len() as u32);
        frame.extend_from_slice(&body);
        let io = |source| Error::Io {
            addr: self.addr.clone(),
            source,
        };
        self.stream.write_all(&frame).await.map_err(io)?;

        let len = self.stream.read_u32().await.map_err(|source| Error::Io {
            addr: self.addr.clone(),
            source,
        })? as usize;
        if len > MAX_FRAME {
            return Err(Error::Protocol(format!(
                "{api:?}: response of {len} bytes exceeds the {MAX_FRAME}-byte limit"
            )));
        }
        // Read into spare capacity, not a zeroed buffer: a fetch answer is a megabyte or more.
        let mut buf = self.buffers.take(len, Instant::now());
        while buf.len() < len {
            let want = len - buf.len();
            let n = self
                .stream
                .read_buf(&mut (&mut buf).limit(want))
                .await
                .map_err(|source| Error::Io {
                    addr: self.addr.clone(),
                    source,
                })?;
            if n == 0 {
                return Err(Error::Io {
                    addr: self.addr.clone(),
                    source: std::io::ErrorKind::UnexpectedEof.into(),
                });
            }
        }
        let mut buf = buf.freeze();
        self.buffers.track(&buf);
        let header_version = <R::Response as HeaderVersion>::header_version(version);
        let header = ResponseHeader::decode(&mut buf, header_version).map_err(codec)?;
        if header.correlation_id != correlation_id {
            return Err(Error::Protocol(format!(
                "{api:?}: response for request {} arrived for request {correlation_id}",
                header.correlation_id
            )));
        }
        let resp = <R::Response as Decodable>::decode(&mut buf, version).map_err(codec)?;
        if buf.has_remaining() {
            tracing::debug!(?api, extra = buf.remaining(), "response had trailing bytes");
        }
        Ok(resp)
    }
}

pub fn api_key(key: i16) -> ApiKey {
    ApiKey::try_from(key).unwrap_or(ApiKey::ApiVersions)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{ApiVersionsResponse, MetadataRequest, ResponseHeader};
    use tokio::net::TcpListener;

    use super::*;

    /// A broker that answers the ApiVersions handshake, then reads requests and never answers.
    async fn silent_broker() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let len = s.read_u32().await.unwrap() as usize;
            let mut req = vec![0u8; len];
            s.read_exact(&mut req).await.unwrap();
            let correlation = i32::from_be_bytes(req[4..8].try_into().unwrap());
            let mut body = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(correlation)
                .encode(&mut body, 0)
                .unwrap();
            ApiVersionsResponse::default()
                .with_api_keys(vec![ApiVersion::default()
                    .with_api_key(ApiKey::Metadata as i16)
                    .with_min_version(0)
                    .with_max_version(12)])
                .encode(&mut body, 0)
                .unwrap();
            s.write_u32(body.len() as u32).await.unwrap();
            s.write_all(&body).await.unwrap();
            let mut sink = vec![0u8; 1 << 16];
            while s.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        });
        addr
    }

    #[tokio::test]
    async fn a_request_given_up_on_leaves_the_connection_unusable() {
        let addr = silent_broker().await;
        let mut conn = Connection::connect(&addr, "test").await.unwrap();
        conn.set_timeout(Duration::from_millis(100));
        let err = conn.send(&MetadataRequest::default()).await.unwrap_err();
        assert!(matches!(err, Error::Timeout(_)), "{err}");
        assert!(conn.is_broken(), "its answer may still arrive");
        // A late answer must never be read as the next request's: the connection refuses.
        let err = conn.send(&MetadataRequest::default()).await.unwrap_err();
        assert!(err.to_string().contains("abandoned mid-exchange"), "{err}");

        // The same for a future dropped halfway (a cancelled task).
        let mut conn = Connection::connect(&silent_broker().await, "test")
            .await
            .unwrap();
        let req = MetadataRequest::default();
        let cancelled = tokio::time::timeout(Duration::from_millis(50), conn.send(&req)).await;
        assert!(cancelled.is_err());
        assert!(conn.is_broken());
    }
}
