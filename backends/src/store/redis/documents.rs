//! Versioned documents and id sets on Redis: each document is a hash of `v` (version) and
//! `body`, written only through one compare-and-set script, so scheduler replicas never
//! overwrite each other's task records. The body is packed ([`super::packed`]): a task record
//! is JSON that zstd shrinks several times.

use std::sync::LazyLock;

use redis::Script;

use super::packed::{pack, unpack_text};
use super::{RedisStore, Replay, millis};
use crate::BoxFuture;
use crate::store::{DocumentStore, StoreError, Versioned};

/// KEYS: document, then (on a single primary) the same document under its name from before
/// hash tags. ARGV: body, expected version (`''`: create only), TTL in ms (`0`: none). Returns
/// the new version, or nil when the stored version is not the expected one. A document still
/// under its old name is compared there and moved to the new one by its first write.
static PUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local version = redis.call('HGET', KEYS[1], 'v')
if not version and KEYS[2] then version = redis.call('HGET', KEYS[2], 'v') end
if ARGV[2] == '' then
  if version then return false end
elseif version ~= ARGV[2] then
  return false
end
local next = (tonumber(version) or 0) + 1
redis.call('HSET', KEYS[1], 'v', string.format('%d', next), 'body', ARGV[1])
if ARGV[3] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if KEYS[2] then redis.call('DEL', KEYS[2]) end
return next
",
    )
});

impl RedisStore {
    /// Where document `key` lives: `doc:<kind>:{<id>}` for a `<kind>:<id>` key, so a task's
    /// record carries its task's hash tag — a transition's record write and its progress events
    /// go to one cluster node and fail together — else `doc:<key>`.
    fn document_key(&self, key: &str) -> String {
        match key.split_once(':') {
            Some((kind, id)) if !id.is_empty() => {
                format!("{}doc:{kind}:{{{id}}}", self.inner.config.prefix)
            }
            _ => self.key("doc", key),
        }
    }

    /// The document's name before hash tags, still read (and moved by the next write) where
    /// one primary holds everything; a cluster never had it.
    fn legacy_document_key(&self, key: &str) -> Option<String> {
        (!self.inner.links.is_cluster() && key.contains(':')).then(|| self.key("doc", key))
    }

    async fn get_document(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let doc_key = self.document_key(key);
        match self.read_document(&doc_key).await? {
            // Only a record not found under its name is looked for under its old one.
            None => match self.legacy_document_key(key) {
                Some(legacy) => self.read_document(&legacy).await,
                None => Ok(None),
            },
            found => Ok(found),
        }
    }

    async fn read_document(&self, doc_key: &str) -> Result<Option<Versioned>, StoreError> {
        let (version, body): (Option<String>, Option<Vec<u8>>) = self
            .query(
                "get document",
                doc_key,
                Replay::Safe,
                redis::cmd("HMGET").arg(doc_key).arg("v").arg("body"),
            )
            .await?;
        match (version, body) {
            (None, None) => Ok(None),
            (Some(version), Some(body)) => {
                let version = version.parse().map_err(|_| StoreError::Corrupt {
                    key: doc_key.to_owned(),
                    reason: format!("version `{version}` is not a number"),
                })?;
                let body = unpack_text(doc_key, &body)?;
                Ok(Some(Versioned { version, body }))
            }
            _ => Err(StoreError::Corrupt {
                key: doc_key.to_owned(),
                reason: "the document lacks its version or its body".into(),
            }),
        }
    }

    async fn put_document(
        &self,
        key: &str,
        body: &str,
        expected: Option<u64>,
    ) -> Result<Option<u64>, StoreError> {
        let doc_key = self.document_key(key);
        let legacy = self.legacy_document_key(key);
        let expected = expected.map(|v| v.to_string()).unwrap_or_default();
        let ttl = self.inner.config.document_ttl.map_or(0, millis);
        let body = pack(&doc_key, body.as_bytes())?;
        // A replayed compare-and-set whose first try landed would report a conflict with our
        // own write; resend only what never left.
        self.run("put document", &doc_key, Replay::IfUnsent, |mut conn| {
            let mut invocation = PUT.key(&doc_key);
            if let Some(legacy) = &legacy {
                invocation.key(legacy);
            }
            invocation.arg(&body).arg(&expected).arg(ttl);
            async move { invocation.invoke_async(&mut conn).await }
        })
        .await
    }

    async fn add_member(&self, set: &str, member: &str) -> Result<(), StoreError> {
        let key = self.key("set", set);
        let _: i64 = self
            .query(
                "add to set",
                &key,
                Replay::Safe,
                redis::cmd("SADD").arg(&key).arg(member),
            )
            .await?;
        Ok(())
    }

    async fn remove_member(&self, set: &str, member: &str) -> Result<(), StoreError> {
        let key = self.key("set", set);
        let _: i64 = self
            .query(
                "remove from set",
                &key,
                Replay::Safe,
                redis::cmd("SREM").arg(&key).arg(member),
            )
            .await?;
        Ok(())
    }

    async fn members(&self, set: &str) -> Result<Vec<String>, StoreError> {
        let key = self.key("set", set);
        let mut members: Vec<String> = self
            .query(
                "list set",
                &key,
                Replay::Safe,
                redis::cmd("SMEMBERS").arg(&key),
            )
            .await?;
        members.sort();
        Ok(members)
    }
}

impl DocumentStore for RedisStore {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(self.get_document(key))
    }

    fn put<'a>(
        &'a self,
        key: &'a str,
        body: &'a str,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(self.put_document(key, body, expected))
    }

    fn set_add<'a>(
        &'a self,
        set: &'a str,
        member: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.add_member(set, member))
    }

    fn set_remove<'a>(
        &'a self,
        set: &'a str,
        member: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.remove_member(set, member))
    }

    fn set_members<'a>(&'a self, set: &'a str) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        Box::pin(self.members(set))
    }
}
