//! One bucket of an S3-compatible store, through aws-sdk-s3: path-style
//! addressing (what self-hosted stores expect), static credentials, an
//! optional private CA, retries with backoff, and multipart uploads with
//! parts in flight in parallel.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, retry::RetryConfig};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};
use aws_smithy_http_client::tls::{self, TlsContext, TrustStore, rustls_provider::CryptoMode};
use futures::stream::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::layout::Listed;

/// Where a bucket is and how to reach it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreConfig {
    /// `https://…` or `http://…`; AWS's own endpoints when absent.
    pub endpoint: Option<String>,
    pub region: String,
    pub bucket: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    /// PEM certificates to trust besides the system's (a private CA).
    pub ca_bundle: Option<Vec<u8>>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the CA bundle for the object store is not usable: {0}")]
    CaBundle(String),
    #[error("object store: {operation} {key}: {message}")]
    Request {
        operation: &'static str,
        key: String,
        message: String,
        /// The store answered (4xx): retrying as is will not help.
        refused: bool,
    },
    #[error("reading what to upload to {key}: {source}")]
    Read {
        key: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    fn request<E, R>(operation: &'static str, key: &str) -> impl FnOnce(SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let key = key.to_owned();
        move |error| {
            let refused = matches!(&error, SdkError::ServiceError(_));
            let message = match error.code() {
                Some(code) => format!(
                    "{code}: {}",
                    error.message().unwrap_or("refused by the store")
                ),
                None => DisplayErrorContext(&error).to_string(),
            };
            Self::Request {
                operation,
                key,
                message,
                refused,
            }
        }
    }

    /// Whether the store itself refused (wrong credentials, no such bucket).
    pub fn refused(&self) -> bool {
        matches!(self, Self::Request { refused: true, .. })
    }
}

/// The whole body of a GET of `key`.
async fn collect(body: ByteStream, key: &str) -> Result<Bytes, Error> {
    let bytes = body.collect().await.map_err(|e| Error::Request {
        operation: "GET",
        key: key.to_owned(),
        // With its causes: alone it says "streaming error", also when the
        // body failed the store's checksum.
        message: DisplayErrorContext(&e).to_string(),
        refused: false,
    })?;
    Ok(bytes.into_bytes())
}

/// Smallest part S3 accepts but for the last; parts are this size.
pub const PART_SIZE: usize = 16 * 1024 * 1024;

#[derive(Clone, Debug)]
pub struct Store {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl Store {
    pub fn new(config: &StoreConfig) -> Result<Self, Error> {
        let mut trust = TrustStore::default();
        if let Some(pem) = &config.ca_bundle {
            if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
                return Err(Error::CaBundle("no PEM certificate in it".into()));
            }
            trust = trust.with_pem_certificate(pem.as_slice());
        }
        let tls = TlsContext::builder()
            .with_trust_store(trust)
            .build()
            .map_err(|e| Error::CaBundle(e.to_string()))?;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .tls_context(tls)
            .build_https();
        let credentials = Credentials::new(
            &config.access_key_id,
            &config.secret_access_key,
            None,
            None,
            "tusk",
        );
        let mut builder = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(config.region.clone()))
            .credentials_provider(credentials)
            .http_client(http)
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(5)
                    .with_initial_backoff(Duration::from_millis(200)),
            )
            .force_path_style(true);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        Ok(Self {
            client: aws_sdk_s3::Client::from_conf(builder.build()),
            bucket: config.bucket.clone(),
        })
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Creates the bucket; one that already exists and is ours is fine.
    pub async fn create_bucket(&self) -> Result<(), Error> {
        match self
            .client
            .create_bucket()
            .bucket(&self.bucket)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_bucket_already_owned_by_you()) =>
            {
                Ok(())
            }
            Err(error) => Err(Error::request("CREATE BUCKET", &self.bucket)(error)),
        }
    }

    /// Writes one object in one request, with user metadata.
    pub async fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        metadata: &[(&str, &str)],
    ) -> Result<(), Error> {
        let mut request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(ByteStream::from(body));
        for (name, value) in metadata {
            request = request.metadata(*name, *value);
        }
        request.send().await.map_err(Error::request("PUT", key))?;
        Ok(())
    }

    /// The object's content, or `None` when there is no such key.
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        let Some(body) = self.get_stream(key).await? else {
            return Ok(None);
        };
        Ok(Some(collect(body, key).await?.to_vec()))
    }

    /// The object's content as it arrives, or `None` when there is no such
    /// key: for objects too large to hold in memory.
    pub async fn get_stream(&self, key: &str) -> Result<Option<ByteStream>, Error> {
        let answer = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await;
        match answer {
            Ok(object) => Ok(Some(object.body)),
            Err(error) if error.as_service_error().is_some_and(|e| e.is_no_such_key()) => Ok(None),
            Err(error) => Err(Error::request("GET", key)(error)),
        }
    }

    /// `len` bytes of the object from `start` (fewer at its end), or `None`
    /// when there is no such key.
    pub async fn get_range(&self, key: &str, start: u64, len: u64) -> Result<Option<Bytes>, Error> {
        let last = start + len.max(1) - 1;
        let answer = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={start}-{last}"))
            .send()
            .await;
        let body = match answer {
            Ok(object) => object.body,
            Err(error) if error.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                return Ok(None);
            }
            Err(error) => return Err(Error::request("GET", key)(error)),
        };
        Ok(Some(collect(body, key).await?))
    }

    /// The object's user metadata, or `None` when there is no such key.
    pub async fn head(&self, key: &str) -> Result<Option<HashMap<String, String>>, Error> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(head) => Ok(Some(head.metadata.unwrap_or_default())),
            Err(error) if error.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(None),
            Err(error) => Err(Error::request("HEAD", key)(error)),
        }
    }

    /// Every object under `prefix`, in key order.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Listed>, Error> {
        let pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        let pages: Vec<_> = pages
            .try_collect()
            .await
            .map_err(Error::request("LIST", prefix))?;
        let mut listed: Vec<Listed> = pages
            .into_iter()
            .flat_map(|page| page.contents.unwrap_or_default())
            .filter_map(|object| {
                Some(Listed {
                    key: object.key?,
                    size: object.size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
                    modified: object.last_modified.map(|t| t.secs()),
                })
            })
            .collect();
        listed.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(listed)
    }

    /// Deletes `keys` (up to a thousand per request, as S3 allows).
    pub async fn delete(&self, keys: &[String]) -> Result<(), Error> {
        for chunk in keys.chunks(1000) {
            let objects: Vec<ObjectIdentifier> = chunk
                .iter()
                .filter_map(|k| ObjectIdentifier::builder().key(k).build().ok())
                .collect();
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| Error::Request {
                    operation: "DELETE",
                    key: chunk.first().cloned().unwrap_or_default(),
                    message: e.to_string(),
                    refused: false,
                })?;
            let answer = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .await
                .map_err(Error::request(
                    "DELETE",
                    chunk.first().map_or("", String::as_str),
                ))?;
            if let Some(failed) = answer.errors.unwrap_or_default().first() {
                return Err(Error::Request {
                    operation: "DELETE",
                    key: failed.key.clone().unwrap_or_default(),
                    message: failed.message.clone().unwrap_or_default(),
                    refused: true,
                });
            }
        }
        Ok(())
    }

    /// Streams `reader` to `key` as a multipart upload, `parallel` parts in
    /// flight, holding at most `parallel + 1` parts in memory; returns the
    /// bytes written. A failed upload is aborted, so no partial object is
    /// ever visible under `key`.
    pub async fn upload<R>(
        &self,
        key: &str,
        mut reader: R,
        parallel: usize,
        metadata: &[(&str, &str)],
    ) -> Result<u64, Error>
    where
        R: AsyncRead + Unpin,
    {
        let mut create = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key);
        for (name, value) in metadata {
            create = create.metadata(*name, *value);
        }
        let created = create
            .send()
            .await
            .map_err(Error::request("CREATE MULTIPART", key))?;
        let upload_id = created.upload_id.ok_or_else(|| Error::Request {
            operation: "CREATE MULTIPART",
            key: key.to_owned(),
            message: "the store gave no upload id".into(),
            refused: true,
        })?;
        let sent = self
            .send_parts(key, &upload_id, &mut reader, parallel.max(1))
            .await;
        match sent {
            Ok((parts, bytes)) => {
                let completed = CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build();
                self.client
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .multipart_upload(completed)
                    .send()
                    .await
                    .map_err(Error::request("COMPLETE MULTIPART", key))?;
                Ok(bytes)
            }
            Err(error) => {
                // Best effort: a store that cannot be reached now keeps the
                // parts until its own lifecycle rules drop them; they are
                // never visible as an object.
                let _ = self
                    .client
                    .abort_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .send()
                    .await;
                Err(error)
            }
        }
    }

    async fn send_parts<R>(
        &self,
        key: &str,
        upload_id: &str,
        reader: &mut R,
        parallel: usize,
    ) -> Result<(Vec<CompletedPart>, u64), Error>
    where
        R: AsyncRead + Unpin,
    {
        let mut total = 0u64;
        let mut completed = Vec::new();
        let mut in_flight = futures::stream::FuturesUnordered::new();
        let mut number = 0i32;
        loop {
            let part = read_part(reader, key).await?;
            let last = part.len() < PART_SIZE;
            // An empty object still needs one (empty) part; otherwise an empty
            // read only says the previous part was the last.
            if !part.is_empty() || number == 0 {
                number += 1;
                total += part.len() as u64;
                in_flight.push(self.send_part(key, upload_id, number, part));
            }
            while in_flight.len() >= parallel || (last && !in_flight.is_empty()) {
                if let Some(done) = in_flight.next().await {
                    completed.push(done?);
                }
            }
            if last {
                break;
            }
        }
        completed.sort_by_key(|p: &CompletedPart| p.part_number);
        Ok((completed, total))
    }

    async fn send_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        body: Vec<u8>,
    ) -> Result<CompletedPart, Error> {
        let answer = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(number)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(Error::request("UPLOAD PART", key))?;
        Ok(CompletedPart::builder()
            .set_e_tag(answer.e_tag)
            .part_number(number)
            .build())
    }
}

/// Reads up to [`PART_SIZE`] bytes: a short read means the end.
async fn read_part<R: AsyncRead + Unpin>(reader: &mut R, key: &str) -> Result<Vec<u8>, Error> {
    let mut part = Vec::with_capacity(PART_SIZE);
    let mut limited = reader.take(PART_SIZE as u64);
    limited
        .read_to_end(&mut part)
        .await
        .map_err(|source| Error::Read {
            key: key.to_owned(),
            source,
        })?;
    Ok(part)
}
