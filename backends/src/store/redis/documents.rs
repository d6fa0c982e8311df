//! Versioned documents and id sets on Redis: each document is a hash of `v` (version) and
//! `body`, written only through one compare-and-set script, so scheduler replicas never
//! overwrite each other's task records. The body is packed ([`super::packed`]): a task record
//! is JSON that zstd shrinks several times. A set is spread over [`SET_SHARDS`] keys in their
//! own cluster slots, so that one primary's failover cannot refuse every add (decision 200).

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

/// KEYS: document, then (on a single primary) its name from before hash tags. ARGV: the
/// expected version. Deletes the document if it is at that version; returns 1 if deleted.
static DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
for _, key in ipairs(KEYS) do
  local version = redis.call('HGET', key, 'v')
  if version then
    if version ~= ARGV[1] then return 0 end
    redis.call('DEL', key)
    return 1
  end
end
return 0
",
    )
});

/// How many keys one set is spread over. Every one is read to list the set, so a few: enough
/// that each primary of a cluster holds several and an add finds one on another primary.
const SET_SHARDS: usize = 16;

/// The hash tag of each shard of a set: shard `i`'s slot is near the middle of the `i`-th
/// sixteenth of the 16,384 slots (`s174` is slot 489, `s432` slot 1563, …), so the shards
/// spread over a cluster's primaries as evenly as its slot ranges do.
const SHARD_TAGS: [&str; SET_SHARDS] = [
    "s174", "s432", "s354", "s54", "s162", "s28", "s108", "s42", "s12", "s158", "s78", "s132",
    "s214", "s159", "s79", "s124",
];

/// Shards an add tries, from the member's own: far enough apart (a stride of 7 of 16 shards,
/// about 7,000 slots) to reach other primaries of a cluster, few enough that a store that is
/// down altogether refuses in bounded time.
const ADD_TRIES: usize = 4;
const SHARD_STRIDE: usize = 7;

/// The shard a member is added to first, and looked for first: from its FNV-1a hash, the same
/// in every process and version.
fn home_shard(member: &str) -> usize {
    let hash = member.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    // The remainder is below SET_SHARDS: no truncation.
    #[allow(clippy::cast_possible_truncation)]
    let shard = (hash % SET_SHARDS as u64) as usize;
    shard
}

/// The shards an add of `member` tries, in order.
fn add_order(member: &str) -> impl Iterator<Item = usize> {
    let home = home_shard(member);
    (0..ADD_TRIES).map(move |k| (home + k * SHARD_STRIDE) % SET_SHARDS)
}

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

    async fn delete_document(&self, key: &str, expected: u64) -> Result<bool, StoreError> {
        let doc_key = self.document_key(key);
        let legacy = self.legacy_document_key(key);
        let expected = expected.to_string();
        let deleted: i64 = self
            .run("delete document", &doc_key, Replay::Safe, |mut conn| {
                let mut invocation = DELETE.key(&doc_key);
                if let Some(legacy) = &legacy {
                    invocation.key(legacy);
                }
                invocation.arg(&expected);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        Ok(deleted == 1)
    }

    /// Shard `i` of `set`: `{prefix}set:{set}:{tag}` in the tag's slot.
    fn shard_key(&self, set: &str, shard: usize) -> String {
        self.key("set", &format!("{set}:{{{}}}", SHARD_TAGS[shard]))
    }

    /// `set` as one key, before sets were spread: still read and cleaned, never added to.
    fn legacy_set_key(&self, set: &str) -> String {
        self.key("set", set)
    }

    /// Every key `set` may hold members in: its shards, then its name from before them.
    fn set_keys(&self, set: &str) -> Vec<String> {
        (0..SET_SHARDS)
            .map(|shard| self.shard_key(set, shard))
            .chain([self.legacy_set_key(set)])
            .collect()
    }

    /// `SADD` to the member's own shard; while that one's primary does not take writes, to the
    /// next shards in [`add_order`]. A store out of memory refuses at once (it is back-pressure,
    /// not a node's outage).
    async fn add_member(&self, set: &str, member: &str) -> Result<(), StoreError> {
        let mut outage = None;
        for shard in add_order(member) {
            let key = self.shard_key(set, shard);
            let added: Result<i64, StoreError> = self
                .query(
                    "add to set",
                    &key,
                    Replay::Safe,
                    redis::cmd("SADD").arg(&key).arg(member),
                )
                .await;
            match added {
                Ok(_) => return Ok(()),
                Err(e @ StoreError::Unavailable(_)) => outage = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(outage.unwrap_or_else(|| StoreError::Unavailable(format!("add to set `{set}`"))))
    }

    /// `SREM` from the member's own shard; when it was not there (added elsewhere while that
    /// shard's primary was failing over, or before sets were spread), from every other key.
    async fn remove_member(&self, set: &str, member: &str) -> Result<(), StoreError> {
        let home = self.shard_key(set, home_shard(member));
        if self.remove_from(&home, member).await? {
            return Ok(());
        }
        let others = self.set_keys(set).into_iter().filter(|key| *key != home);
        let removals: Vec<_> = others
            .map(|key| async move { self.remove_from(&key, member).await })
            .collect();
        for removed in futures_util::future::join_all(removals).await {
            removed?;
        }
        Ok(())
    }

    /// Whether `member` was in `key` and is not any more.
    async fn remove_from(&self, key: &str, member: &str) -> Result<bool, StoreError> {
        let removed: i64 = self
            .query(
                "remove from set",
                key,
                Replay::Safe,
                redis::cmd("SREM").arg(key).arg(member),
            )
            .await?;
        Ok(removed > 0)
    }

    /// Every shard read at once (and the set's name from before shards); sorted, each member
    /// once.
    async fn members(&self, set: &str) -> Result<Vec<String>, StoreError> {
        let keys = self.set_keys(set);
        let reads: Vec<_> = keys
            .iter()
            .map(|key| async move {
                self.query::<Vec<String>>(
                    "list set",
                    key,
                    Replay::Safe,
                    redis::cmd("SMEMBERS").arg(key),
                )
                .await
            })
            .collect();
        let mut members = std::collections::BTreeSet::new();
        for read in futures_util::future::join_all(reads).await {
            members.extend(read?);
        }
        Ok(members.into_iter().collect())
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

    fn delete<'a>(
        &'a self,
        key: &'a str,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.delete_document(key, expected))
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

#[cfg(test)]
mod tests {
    use redis::cluster_routing::Slot;

    use super::*;

    /// Shard `i`'s tag is in the `i`-th sixteenth of the slots, as its comment says.
    #[test]
    fn each_shard_of_a_set_is_in_its_own_sixteenth_of_the_slots() {
        for (i, tag) in SHARD_TAGS.iter().enumerate() {
            let band = (i * 1024)..((i + 1) * 1024);
            let slot = Slot::for_key(format!("verdict:set:tasks:active:{{{tag}}}"));
            assert!(
                band.clone()
                    .any(|n| Slot::new(u16::try_from(n).unwrap()) == Some(slot)),
                "{tag} is not in slots {band:?}"
            );
        }
    }

    /// An add tries shards far apart, each once, starting from the member's own.
    #[test]
    fn an_add_tries_distinct_shards_from_the_members_own() {
        for member in ["t-1", "4f7c2a9e-0000-4000-8000-000000000000", ""] {
            let order: Vec<usize> = add_order(member).collect();
            assert_eq!(order[0], home_shard(member));
            let distinct: std::collections::BTreeSet<_> = order.iter().collect();
            assert_eq!(distinct.len(), ADD_TRIES, "{order:?}");
        }
        // Members spread over the shards.
        let homes: std::collections::BTreeSet<usize> =
            (0..200).map(|i| home_shard(&format!("task-{i}"))).collect();
        assert_eq!(homes.len(), SET_SHARDS);
    }
}
