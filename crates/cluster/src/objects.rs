//! Record bytes in immutable objects, each under a name no other write can use (the writer's
//! node id and a random UUID), so no overwrite and no conditional PUT is ever needed.
//!
//! Two stores, chosen by URL:
//! - `s3://BUCKET[/PREFIX]?endpoint=URL[&region=R]` — any S3-protocol server (AWS S3, MinIO,
//!   SeaweedFS, …) through the `object_store` crate, credentials from the usual
//!   `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` variables. A PUT that returned success is
//!   durable.
//! - `file:///DIR` — a directory on this machine (a one-machine cluster): each object written
//!   to a temporary file, fsynced, renamed into place, and the directory fsynced, before
//!   [`Objects::put`] returns, as the single node fsyncs before it answers.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

/// Where a committed run of records is: a byte range of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub name: String,
    pub position: u64,
    pub len: u64,
}

impl ObjectRef {
    /// `name position len`, as stored in the commit index.
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.name, self.position, self.len)
    }

    /// # Errors
    /// Not an encoded reference.
    pub fn decode(value: &[u8]) -> crate::Result<ObjectRef> {
        let text = String::from_utf8_lossy(value);
        let mut fields = text.split(' ');
        let parsed = (|| {
            let name = fields.next()?.to_string();
            let position = fields.next()?.parse().ok()?;
            let len = fields.next()?.parse().ok()?;
            (fields.next().is_none() && !name.is_empty()).then_some(ObjectRef {
                name,
                position,
                len,
            })
        })();
        parsed.ok_or_else(|| crate::Error::Invalid {
            what: "object reference",
            detail: text.into_owned(),
        })
    }
}

/// An object store.
#[derive(Debug, Clone)]
pub enum Objects {
    S3 {
        store: Arc<dyn ObjectStore>,
        prefix: String,
    },
    Dir(PathBuf),
}

fn store_error(e: impl std::fmt::Display) -> crate::Error {
    crate::Error::Objects(e.to_string())
}

impl Objects {
    /// The store a URL names (see the module docs).
    ///
    /// # Errors
    /// An unknown scheme, a missing bucket or endpoint, or a directory that cannot be created.
    pub fn from_url(url: &str) -> crate::Result<Objects> {
        let invalid = |detail: String| crate::Error::Invalid {
            what: "object store URL",
            detail,
        };
        let parsed = url::Url::parse(url).map_err(|e| invalid(format!("{url}: {e}")))?;
        match parsed.scheme() {
            "file" => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| invalid(format!("{url}: not a local path")))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| invalid(format!("{}: {e}", dir.display())))?;
                Ok(Objects::Dir(dir))
            }
            "s3" => {
                let bucket = parsed
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| invalid(format!("{url}: no bucket")))?;
                let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
                for (k, v) in parsed.query_pairs() {
                    builder = match k.as_ref() {
                        "endpoint" => builder
                            .with_endpoint(v.as_ref())
                            .with_allow_http(v.starts_with("http://"))
                            .with_virtual_hosted_style_request(false),
                        "region" => builder.with_region(v.as_ref()),
                        other => return Err(invalid(format!("{url}: unknown option {other}"))),
                    };
                }
                let store = builder
                    .build()
                    .map_err(|e| invalid(format!("{url}: {e}")))?;
                Ok(Objects::S3 {
                    store: Arc::new(store),
                    prefix: parsed.path().trim_matches('/').to_string(),
                })
            }
            other => Err(invalid(format!(
                "{url}: scheme {other} (use s3:// or file://)"
            ))),
        }
    }

    /// A name no other write uses: the writer's node id and a random UUID.
    pub fn unique_name(node_id: i32) -> String {
        format!("n{node_id}-{}", uuid::Uuid::new_v4().simple())
    }

    /// Whether `name` is one [`Objects::unique_name`] makes, or the temporary file a
    /// directory store writes it through (`.NAME.tmp`): the collector deletes nothing else,
    /// so a stray file in the store is never touched.
    pub fn is_object_name(name: &str) -> bool {
        let bare = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .unwrap_or(name);
        let Some((node, id)) = bare.strip_prefix('n').and_then(|n| n.split_once('-')) else {
            return false;
        };
        node.parse::<i32>().is_ok() && id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
    }

    fn path(prefix: &str, name: &str) -> ObjectPath {
        if prefix.is_empty() {
            ObjectPath::from(name)
        } else {
            ObjectPath::from(format!("{prefix}/{name}"))
        }
    }

    /// Stores `bytes` as object `name`, durably, before returning.
    ///
    /// # Errors
    /// The store refused or failed (the object may or may not exist; it is never named by a
    /// commit then, and is collected as an orphan).
    pub async fn put(&self, name: &str, bytes: Bytes) -> crate::Result<()> {
        match self {
            Objects::S3 { store, prefix } => {
                store
                    .put(&Self::path(prefix, name), PutPayload::from_bytes(bytes))
                    .await
                    .map_err(store_error)?;
                Ok(())
            }
            Objects::Dir(dir) => {
                let dir = dir.clone();
                let name = name.to_string();
                tokio::task::spawn_blocking(move || put_file(&dir, &name, &bytes))
                    .await
                    .map_err(store_error)?
                    .map_err(store_error)
            }
        }
    }

    /// The bytes `object` refers to.
    ///
    /// # Errors
    /// Missing object, short object, or the store failed.
    pub async fn get(&self, object: &ObjectRef) -> crate::Result<Bytes> {
        let range = object.position..object.position + object.len;
        let bytes = match self {
            Objects::S3 { store, prefix } => store
                .get_range(&Self::path(prefix, &object.name), range)
                .await
                .map_err(store_error)?,
            Objects::Dir(dir) => {
                let path = dir.join(&object.name);
                let all = tokio::fs::read(&path).await.map_err(store_error)?;
                let (start, end) = (range.start as usize, range.end as usize);
                if end > all.len() {
                    return Err(store_error(format!(
                        "{}: {} bytes, range ends at {end}",
                        path.display(),
                        all.len()
                    )));
                }
                Bytes::copy_from_slice(&all[start..end])
            }
        };
        if bytes.len() as u64 != object.len {
            return Err(store_error(format!(
                "{}: {} bytes returned for a range of {}",
                object.name,
                bytes.len(),
                object.len
            )));
        }
        Ok(bytes)
    }
}

impl Objects {
    /// The names of every object in the store (for a directory: its files, including the
    /// temporary `.NAME.tmp` of a PUT under way or abandoned by a crash).
    ///
    /// # Errors
    /// The store failed.
    pub async fn list(&self) -> crate::Result<Vec<String>> {
        match self {
            Objects::S3 { store, prefix } => {
                let at = (!prefix.is_empty()).then(|| ObjectPath::from(prefix.as_str()));
                let listed = store
                    .list_with_delimiter(at.as_ref())
                    .await
                    .map_err(store_error)?;
                Ok(listed
                    .objects
                    .into_iter()
                    .filter_map(|meta| meta.location.filename().map(str::to_string))
                    .collect())
            }
            Objects::Dir(dir) => {
                let mut names = Vec::new();
                let mut entries = tokio::fs::read_dir(dir).await.map_err(store_error)?;
                while let Some(entry) = entries.next_entry().await.map_err(store_error)? {
                    if entry.file_type().await.map_err(store_error)?.is_file() {
                        names.push(entry.file_name().to_string_lossy().into_owned());
                    }
                }
                Ok(names)
            }
        }
    }

    /// Deletes object `name`; one already gone is no error.
    ///
    /// # Errors
    /// The store failed.
    pub async fn delete(&self, name: &str) -> crate::Result<()> {
        match self {
            Objects::S3 { store, prefix } => match store.delete(&Self::path(prefix, name)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(store_error(e)),
            },
            Objects::Dir(dir) => match tokio::fs::remove_file(dir.join(name)).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(store_error(e)),
            },
        }
    }
}

/// Writes `dir/name` atomically and durably: a temporary file fsynced, renamed, the directory
/// fsynced.
fn put_file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_round_trip_and_garbage_is_refused() {
        let r = ObjectRef {
            name: Objects::unique_name(3),
            position: 17,
            len: 4096,
        };
        assert_eq!(ObjectRef::decode(r.encode().as_bytes()).unwrap(), r);
        for bad in ["", "x", "x 1", "x 1 y", "x 1 2 3", " 1 2"] {
            assert!(ObjectRef::decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_names_the_store_makes_are_object_names() {
        let name = Objects::unique_name(12);
        assert!(Objects::is_object_name(&name));
        assert!(Objects::is_object_name(&format!(".{name}.tmp")));
        for other in [
            "",
            "n1-",
            "notes.txt",
            "n1-xyz",
            &format!("x{name}"),
            &format!("{name}.tmp"),
        ] {
            assert!(!Objects::is_object_name(other), "{other:?}");
        }
    }

    #[test]
    fn names_are_never_reused() {
        let names: std::collections::BTreeSet<_> =
            (0..1000).map(|_| Objects::unique_name(1)).collect();
        assert_eq!(names.len(), 1000);
    }

    #[test]
    fn urls_name_their_store_or_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}/objects", dir.path().display());
        assert!(matches!(Objects::from_url(&url), Ok(Objects::Dir(_))));
        assert!(
            Objects::from_url("s3://bucket/pre?endpoint=http://127.0.0.1:1&region=us-east-1")
                .is_ok()
        );
        for bad in [
            "ftp://x/y",
            "s3:///nobucket",
            "s3://b?colour=blue",
            "not a url",
        ] {
            assert!(Objects::from_url(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn a_directory_store_keeps_what_it_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let objects = Objects::from_url(&format!("file://{}", dir.path().display())).unwrap();
        let name = Objects::unique_name(1);
        objects
            .put(&name, Bytes::from_static(b"hello, objects"))
            .await
            .unwrap();
        let r = ObjectRef {
            name: name.clone(),
            position: 7,
            len: 7,
        };
        assert_eq!(&objects.get(&r).await.unwrap()[..], b"objects");
        let past = ObjectRef { len: 99, ..r };
        assert!(objects.get(&past).await.is_err());
    }
}
