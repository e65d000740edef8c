//! Message-level storage: how a record's messages become rows of `chat_messages`, each stored once.
//!
//! A conversation is a chain of message nodes. A node's id is a content address: SipHash-2-4 (128 bits) over
//! its parent's id (or, for a conversation's first message, the caller it belongs to) and the message's JSON,
//! keyed with a random key the database keeps (`chat_store_key`, created once per database). The same history
//! therefore always yields the same ids, whoever sends it: a stateless client resending its whole history with
//! every request (and no conversation id) walks the nodes already stored and adds only the new ones, and two
//! callers never share a node (the caller is part of the first node's id). SipHash is a pseudo-random
//! function: without the key nobody can craft two messages with the same id (a client cannot make its record
//! point at someone else's history), and it costs a few instructions per byte where SHA-256 costs about twenty.
//! A record stores the id of the last node of its history (request messages followed by response messages)
//! and how many of those messages it sent; reading walks the chain back from there.
//!
//! Computing ids needs each message's JSON with its blobs' hashes, so the encoder keeps the chains it wrote
//! recently in memory ([`ChainCache`]), as digests only: per message a keyed 128-bit SipHash of its JSON with
//! each blob's bytes in place of their base64 (no allocation, no SHA-256), never the message itself, so a
//! conversation's images are not held after its request. A record whose message digests start with a cached
//! chain's (found by conversation id, or, for stateless clients, by the chain's length and last message) reuses
//! those ids; only the messages past the shared prefix are encoded (blobs hashed with SHA-256) and written. On a
//! cold cache (after a restart) every message is encoded once, and the database ignores the nodes it already has
//! (`ON CONFLICT DO NOTHING`).
//!
//! Retention (`retention.rs`) deletes old calls and the nodes no remaining call reaches, so the cache must never
//! hand out a node that may be gone: a chain is remembered only when its record ended within
//! [`CACHE_TRUST`] of its commit, and trusted for that long after it (the blob hashes too). A
//! chain the cache trusts is therefore reached by a call that ended less than twice that ago, which retention
//! keeps (it deletes only calls that ended at least [`crate::store::Retention::MIN_KEEP`] ago), with its nodes.

use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use siphasher::sip128::{Hasher128, SipHasher24};
use tower_chat::{ChatOptions, Message, Shared};

use crate::record::CallRecord;
use crate::store::blobs::{digest_message, encode_message, NewBlob, RecentBlobs, CACHE_TRUST};
use crate::store::StoreError;

/// A node id: 32 lowercase hex digits.
pub(crate) type NodeId = Arc<str>;

/// A message node the database may not have yet.
#[derive(Clone, Debug)]
pub(crate) struct NewNode {
    pub(crate) id: NodeId,
    pub(crate) parent: Option<NodeId>,
    pub(crate) position: i64,
    pub(crate) message: String,
}

/// Content-addressed request options (tools offered included), stored once in `chat_options`.
#[derive(Clone, Debug)]
pub(crate) struct NewOptions {
    pub(crate) id: NodeId,
    pub(crate) json: String,
}

/// What one record adds besides its `chat_calls` row.
#[derive(Debug)]
pub(crate) struct Encoded {
    /// The last node of the record's history (request then response messages); `None` when it has none.
    pub(crate) head: Option<NodeId>,
    /// How many of the history's messages the call sent.
    pub(crate) request_len: i64,
    /// Nodes past the prefix the cache knew (the database ignores those it already has).
    pub(crate) nodes: Vec<NewNode>,
    /// The options' id.
    pub(crate) options_id: NodeId,
    /// The options, when the cache did not know them.
    pub(crate) options: Option<NewOptions>,
    /// The bytes of the new nodes' binary parts, unless this store wrote them before (the database ignores
    /// those it already has).
    pub(crate) blobs: Vec<NewBlob>,
}

fn hex(bytes: &[u8; 16]) -> NodeId {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
    Arc::from(std::str::from_utf8(&out).expect("hex digits are ASCII"))
}

/// The database's hashing key (`chat_store_key`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodeKey(pub(crate) u64, pub(crate) u64);

impl NodeKey {
    /// A fresh random key, for a database that has none yet.
    pub(crate) fn random() -> Self {
        let (k0, k1) = uuid::Uuid::new_v4().as_u64_pair();
        NodeKey(k0, k1)
    }

    fn hasher(self) -> SipHasher24 {
        SipHasher24::new_with_keys(self.0, self.1)
    }
}

/// The id of a node: keyed SipHash-2-4 (128 bits) over length-prefixed fields.
fn node_id(key: NodeKey, parent: Option<&str>, scope: Option<&str>, message: &str) -> NodeId {
    let mut hash = key.hasher();
    match parent {
        Some(parent) => {
            hash.write(b"n");
            hash.write(parent.as_bytes());
        }
        None => {
            // The first message of a conversation: scoped to its caller.
            let scope = scope.unwrap_or("");
            hash.write(b"r");
            hash.write(&(scope.len() as u64).to_le_bytes());
            hash.write(scope.as_bytes());
        }
    }
    hash.write(&(message.len() as u64).to_le_bytes());
    hash.write(message.as_bytes());
    hex(&hash.finish128().as_bytes())
}

fn options_id(key: NodeKey, json: &str) -> NodeId {
    let mut hash = key.hasher();
    hash.write(b"o");
    hash.write(json.as_bytes());
    hex(&hash.finish128().as_bytes())
}

/// An in-memory digest of one message (never stored: it stands for the message in the cache). Keyed with the
/// database's key, so nobody can craft two messages with the same digest.
type Digest = u128;

fn digest(key: NodeKey, message: &Message) -> Result<Digest, StoreError> {
    let mut hash = key.hasher();
    digest_message(message, &mut hash)?;
    Ok(hash.finish128().as_u128())
}

/// The node ids of a history, last first, as a persistent list: a chain that extends another shares its
/// predecessor's ids instead of copying them (one allocation per new message, not per message of the history).
#[derive(Debug)]
struct Ids {
    id: NodeId,
    len: usize,
    parent: Option<Arc<Ids>>,
}

impl Drop for Ids {
    // Iterative: dropping a long history's list recursively would overflow the stack.
    fn drop(&mut self) {
        let mut next = self.parent.take();
        while let Some(node) = next {
            match Arc::try_unwrap(node) {
                Ok(mut only) => next = only.parent.take(),
                Err(_) => break,
            }
        }
    }
}

/// The first `len` ids of the list ending at `head` (`len` at most the list's length).
fn prefix(head: &Arc<Ids>, len: usize) -> Option<Arc<Ids>> {
    let mut at = head;
    if len == 0 {
        return None;
    }
    while at.len > len {
        at = at.parent.as_ref()?;
    }
    Some(at.clone())
}

/// A history the encoder wrote: one digest per message (request then response) and the node ids.
#[derive(Debug)]
struct Chain {
    scope: Option<String>,
    request_len: usize,
    digests: Vec<Digest>,
    ids: Arc<Ids>,
    /// When the call whose record wrote this chain ended.
    ended_at: SystemTime,
    /// When the chain was remembered (set once committed): trusted for [`CACHE_TRUST`] after it.
    remembered: std::sync::OnceLock<Instant>,
}

impl Chain {
    /// What one node of [`Ids`] costs: the node, its `Arc`'s counts and the id's 32 hex digits with theirs.
    const ID_BYTES: usize = std::mem::size_of::<Ids>() + 16 + 32 + 16;

    fn len(&self) -> usize {
        self.ids.len
    }

    /// Whether retention cannot have deleted this chain's nodes (see the module docs).
    fn trusted(&self) -> bool {
        self.trusted_at(Instant::now())
    }

    fn trusted_at(&self, now: Instant) -> bool {
        self.remembered
            .get()
            .is_some_and(|at| now.saturating_duration_since(*at) < CACHE_TRUST)
    }

    /// How many leading messages of a history with these digests this chain shares.
    fn common_prefix(&self, digests: &[Digest]) -> usize {
        self.digests
            .iter()
            .zip(digests)
            .take_while(|(ours, theirs)| ours == theirs)
            .count()
    }

    /// The bytes this chain keeps, counting every id as its own (an upper bound: a chain shares its
    /// predecessor's) and its index entries.
    fn retained_bytes(&self, conversation: &str) -> usize {
        std::mem::size_of::<Chain>()
            + self.digests.capacity() * std::mem::size_of::<Digest>()
            + self.len() * Self::ID_BYTES
            + 3 * (self.scope.as_ref().map_or(0, String::len) + std::mem::size_of::<TailKey>() + 16)
            + conversation.len()
    }
}

type TailKey = (Option<String>, usize, Digest);

#[derive(Debug, Default)]
struct Generation {
    by_conversation: HashMap<String, Arc<Chain>>,
    by_tail: HashMap<TailKey, Arc<Chain>>,
    bytes: usize,
}

/// The chains written recently, in two generations: lookups search both, and when the current one holds more
/// than [`ChainCache::BYTES`] it becomes the previous one (the older is dropped). Memory is bounded by about
/// twice that: a chain keeps ~100 bytes a message (its digest and id), whatever the message holds, media
/// included (each chain counts its whole length, although it shares its ids with the chain it extends).
#[derive(Debug, Default)]
pub(crate) struct ChainCache {
    current: Generation,
    previous: Generation,
    options: Vec<(Shared<ChatOptions>, NodeId)>,
}

impl ChainCache {
    /// The most bytes a generation holds before it is retired (~40,000 messages).
    const BYTES: usize = 4 << 20;
    /// How many distinct option sets (tools offered included) are remembered.
    const OPTIONS: usize = 16;
    /// How far back from a request's end a stateless client's previous history may end.
    const TAIL_PROBES: usize = 8;

    fn by_conversation(&self, conversation: &str) -> Option<Arc<Chain>> {
        self.current
            .by_conversation
            .get(conversation)
            .or_else(|| self.previous.by_conversation.get(conversation))
            .filter(|chain| chain.trusted())
            .cloned()
    }

    fn by_tail(&self, key: &TailKey) -> Option<Arc<Chain>> {
        self.current
            .by_tail
            .get(key)
            .or_else(|| self.previous.by_tail.get(key))
            .filter(|chain| chain.trusted())
            .cloned()
    }

    /// The cached chain sharing the longest prefix with a history (`digests`, of which the first `request_len`
    /// are the request's), and that prefix's length.
    fn best_prefix(
        &self,
        conversation: &str,
        scope: Option<&str>,
        digests: &[Digest],
        request_len: usize,
    ) -> Option<(Arc<Chain>, usize)> {
        let mut best: Option<(Arc<Chain>, usize)> = None;
        if let Some(chain) = self.by_conversation(conversation) {
            if chain.scope.as_deref() == scope {
                let shared = chain.common_prefix(digests);
                if shared >= request_len {
                    return Some((chain, shared));
                }
                best = Some((chain, shared));
            }
        }
        // A stateless client: its request starts with a history written before, which ends a few messages
        // before the request's end (the new user message, or tool results).
        let n = request_len;
        for len in (n.saturating_sub(Self::TAIL_PROBES).max(1)..=n).rev() {
            if best.as_ref().is_some_and(|(_, shared)| *shared >= len) {
                break;
            }
            let key = (scope.map(str::to_owned), len, digests[len - 1]);
            if let Some(chain) = self.by_tail(&key) {
                let shared = chain.common_prefix(digests);
                if best.as_ref().is_none_or(|(_, b)| shared > *b) {
                    best = Some((chain, shared));
                }
            }
        }
        best.filter(|(_, shared)| *shared > 0)
    }

    /// Bytes the cached chains hold.
    #[cfg(test)]
    fn retained_bytes(&self) -> usize {
        self.current.bytes + self.previous.bytes
    }

    fn remember(&mut self, conversation: &str, chain: Arc<Chain>) {
        if self.current.bytes > Self::BYTES {
            self.previous = std::mem::take(&mut self.current);
        }
        // Indexed by where the history ends, and by where its request ends: a client may resend the
        // request's messages and an answer that differs from the recorded one (a dropped reasoning text).
        for len in [chain.request_len, chain.len()] {
            if len > 0 {
                let key = (chain.scope.clone(), len, chain.digests[len - 1]);
                self.current.by_tail.insert(key, chain.clone());
            }
        }
        self.current.bytes += chain.retained_bytes(conversation);
        self.current
            .by_conversation
            .insert(conversation.to_owned(), chain);
    }

    fn options(&self, options: &Shared<ChatOptions>) -> Option<NodeId> {
        self.options
            .iter()
            .find(|(known, _)| Shared::ptr_eq(known, options) || **known == **options)
            .map(|(_, id)| id.clone())
    }

    fn remember_options(&mut self, options: Shared<ChatOptions>, id: NodeId) {
        if self.options.len() >= Self::OPTIONS {
            self.options.remove(0);
        }
        self.options.push((options, id));
    }
}

/// Turns records into message nodes, sharing a [`ChainCache`] between the writes of one store.
#[derive(Debug, Default)]
pub(crate) struct Encoder {
    key: NodeKey,
    cache: Mutex<ChainCache>,
    blobs: Mutex<RecentBlobs>,
}

/// What a batch taught the encoder, remembered only once the batch is committed (a chain the database does not
/// hold must never be reused).
#[derive(Debug, Default)]
pub(crate) struct Pending {
    chains: Vec<(String, Arc<Chain>)>,
    options: Vec<(Shared<ChatOptions>, NodeId)>,
    blobs: Vec<String>,
    /// When the earliest-ended call of the batch ended: the blob hashes are remembered only if it is recent.
    earliest_end: Option<SystemTime>,
}

impl Encoder {
    /// An encoder for the database whose key is `key`.
    pub(crate) fn new(key: NodeKey) -> Self {
        Encoder {
            key,
            cache: Mutex::default(),
            blobs: Mutex::default(),
        }
    }

    /// The nodes and options each record adds. Nodes up to the longest prefix known (cached from committed
    /// writes, or written earlier in this batch) are not serialised again.
    pub(crate) fn encode(
        &self,
        records: &[CallRecord],
    ) -> Result<(Vec<Encoded>, Pending), StoreError> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let mut pending = Pending::default();
        let mut out = Vec::with_capacity(records.len());
        for record in records {
            out.push(encode_one(
                self.key,
                &cache,
                &self.blobs,
                &mut pending,
                record,
            )?);
        }
        Ok((out, pending))
    }

    /// Forget every cached chain, option set and blob hash, handing their memory back. Correctness never
    /// depends on the cache: the next record of a forgotten conversation serialises and hashes its history once,
    /// as after a restart. Called when writes have stopped for a while, so that the memory a burst of
    /// conversations left in the cache (and the allocator pages those entries pin) does not stay forever.
    pub(crate) fn forget(&self) {
        let cache = std::mem::take(&mut *self.cache.lock().unwrap_or_else(|e| e.into_inner()));
        let blobs = std::mem::take(&mut *self.blobs.lock().unwrap_or_else(|e| e.into_inner()));
        // Dropped after the locks are released: freeing a cache of chains must not hold up a concurrent encode.
        drop((cache, blobs));
    }

    /// Bytes the cached chains hold (a test's view of the bound).
    #[cfg(test)]
    pub(crate) fn cached_bytes(&self) -> usize {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retained_bytes()
    }

    /// The batch was committed: its chains and options may be reused.
    /// Only what records that ended recently wrote is remembered, and for [`CACHE_TRUST`] (see the module docs):
    /// a record committed long after its call ended may already be past retention.
    pub(crate) fn committed(&self, pending: Pending) {
        let now = (SystemTime::now(), Instant::now());
        let recent = |ended_at: SystemTime| {
            now.0
                .duration_since(ended_at)
                .map_or(true, |age| age < CACHE_TRUST)
        };
        if !pending.blobs.is_empty() && pending.earliest_end.is_some_and(recent) {
            let mut blobs = self.blobs.lock().unwrap_or_else(|e| e.into_inner());
            for hash in pending.blobs {
                blobs.remember(hash, now.1);
            }
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        for (options, id) in pending.options {
            if cache.options(&options).is_none() {
                cache.remember_options(options, id);
            }
        }
        for (conversation, chain) in pending.chains {
            if recent(chain.ended_at) {
                let _ = chain.remembered.set(now.1);
                cache.remember(&conversation, chain);
            }
        }
    }
}

fn encode_one(
    key: NodeKey,
    cache: &ChainCache,
    recent_blobs: &Mutex<RecentBlobs>,
    pending: &mut Pending,
    record: &CallRecord,
) -> Result<Encoded, StoreError> {
    let scope = record.caller.as_ref().map(|c| c.as_str());
    let conversation = record.conversation_id.as_str();
    pending.earliest_end = Some(
        pending
            .earliest_end
            .map_or(record.ended_at, |end| end.min(record.ended_at)),
    );
    let request = &record.request.messages;
    let response = &record.response.messages[..];

    let known_options = cache.options(&record.request.options).or_else(|| {
        pending
            .options
            .iter()
            .find(|(o, _)| **o == *record.request.options)
            .map(|(_, id)| id.clone())
    });
    let (options_id, options) = match known_options {
        Some(id) => (id, None),
        None => {
            let json = serde_json::to_string(&*record.request.options)
                .map_err(|e| StoreError::with_source("cannot encode request options", e))?;
            let id = options_id(key, &json);
            pending
                .options
                .push((record.request.options.clone(), id.clone()));
            (id.clone(), Some(NewOptions { id, json }))
        }
    };

    let digests = request
        .iter()
        .chain(response)
        .map(|message| digest(key, message))
        .collect::<Result<Vec<_>, _>>()?;
    let mut known = cache.best_prefix(conversation, scope, &digests, request.len());
    // A chain written earlier in this batch (an in-flight record and its final one, a tool loop's rounds).
    for (c, chain) in pending.chains.iter().rev() {
        if c == conversation && chain.scope.as_deref() == scope {
            let shared = chain.common_prefix(&digests);
            if known.as_ref().is_none_or(|(_, b)| shared > *b) {
                known = Some((chain.clone(), shared));
            }
            break;
        }
    }
    let total = request.len() + response.len();
    let mut ids: Option<Arc<Ids>> = known
        .as_ref()
        .and_then(|(chain, shared)| prefix(&chain.ids, *shared));
    let known_len = ids.as_ref().map_or(0, |i| i.len);
    let mut nodes = Vec::with_capacity(total - known_len);
    let mut blobs = Vec::new();
    for (i, message) in request.iter().chain(response).enumerate().skip(known_len) {
        // Asked only for messages that carry bytes: a text-only record never takes the lock.
        let written = |hash: &str| {
            pending.blobs.iter().any(|known| known == hash)
                || recent_blobs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(hash)
        };
        let json = encode_message(message, written, &mut blobs)?;
        let parent = ids.as_ref().map(|p| p.id.clone());
        let id = node_id(key, parent.as_deref(), scope, &json);
        ids = Some(Arc::new(Ids {
            id: id.clone(),
            len: i + 1,
            parent: ids,
        }));
        nodes.push(NewNode {
            id,
            parent,
            position: i as i64,
            message: json,
        });
    }
    pending
        .blobs
        .extend(blobs.iter().map(|blob| blob.hash.clone()));
    let head = ids.as_ref().map(|i| i.id.clone());
    if let Some(ids) = ids {
        pending.chains.push((
            conversation.to_owned(),
            Arc::new(Chain {
                scope: scope.map(str::to_owned),
                request_len: request.len(),
                digests,
                ids,
                ended_at: record.ended_at,
                remembered: std::sync::OnceLock::new(),
            }),
        ));
    }
    Ok(Encoded {
        head,
        request_len: request.len() as i64,
        nodes,
        options_id,
        options,
        blobs,
    })
}

/// A history read back: the messages from the first to `head`, split into request and response.
pub(crate) fn split_history(
    mut messages: Vec<Message>,
    request_len: i64,
    call_id: &str,
) -> Result<(Vec<Message>, Vec<Message>), StoreError> {
    let request_len = usize::try_from(request_len)
        .ok()
        .filter(|n| *n <= messages.len())
        .ok_or_else(|| {
            StoreError::new(format!("call {call_id}: its stored history is too short"))
        })?;
    let response = messages.split_off(request_len);
    Ok((messages, response))
}

/// The recursive query reading a history back: every node from `head` to the first, ordered by position.
/// `param` is the dialect's placeholder, `text` how to read the JSON column as text.
pub(crate) fn history_sql(param: &str, text: &str) -> String {
    format!(
        "WITH RECURSIVE chain(id, parent_id, position, message) AS ( \
         SELECT id, parent_id, position, message FROM chat_messages WHERE id = {param} \
         UNION ALL SELECT m.id, m.parent_id, m.position, m.message FROM chat_messages m \
         JOIN chain c ON m.id = c.parent_id) \
         SELECT {text} FROM chain ORDER BY position"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat::{CallerIdentity, ChatResponse, ConversationId};

    use crate::record::{CallId, CallOutcome, RecordedRequest};

    fn record(
        conversation: &str,
        caller: Option<&str>,
        request: Vec<Message>,
        answer: &str,
    ) -> CallRecord {
        CallRecord {
            call_id: CallId::generate(),
            conversation_id: ConversationId::new(conversation),
            caller: caller.map(CallerIdentity::new),
            request_id: None,
            team: None,
            round_index: 0,
            started_at: SystemTime::now(),
            first_token_at: None,
            // Recent: the cache remembers only chains of calls that ended recently.
            ended_at: SystemTime::now(),
            provider: None,
            model: None,
            request: RecordedRequest {
                messages: Shared::new(request),
                options: Shared::new(ChatOptions::default()),
                omitted: None,
            },
            response: ChatResponse {
                messages: vec![Message::assistant(answer)],
                ..ChatResponse::default()
            },
            outcome: CallOutcome::Completed,
            cost: None,
            usage_estimated: false,
            guardrail: Vec::new(),
        }
    }

    /// The turn after `record("c", None, [user "hi"], "hello")`.
    fn second_turn() -> CallRecord {
        record(
            "c",
            None,
            vec![
                Message::user("hi"),
                Message::assistant("hello"),
                Message::user("more"),
            ],
            "ok",
        )
    }

    /// Encode one record and commit it.
    fn write(encoder: &Encoder, record: &CallRecord) -> Encoded {
        let (mut encoded, pending) = encoder.encode(std::slice::from_ref(record)).unwrap();
        encoder.committed(pending);
        encoded.pop().unwrap()
    }

    #[test]
    fn a_batch_that_was_not_committed_teaches_nothing() {
        let encoder = Encoder::default();
        let first = record("c", None, vec![Message::user("hi")], "hello");
        let (encoded, _dropped) = encoder.encode(std::slice::from_ref(&first)).unwrap();
        assert_eq!(encoded[0].nodes.len(), 2);
        // The write failed (pending dropped): the next record writes every node again.
        assert_eq!(write(&encoder, &first).nodes.len(), 2);
        assert_eq!(write(&encoder, &first).nodes.len(), 0);
        // Within one batch, a later record reuses an earlier one's nodes.
        let next = second_turn();
        let other = record("d", None, vec![Message::user("new")], "x");
        let (batch, _) = encoder
            .encode(&[other.clone(), next.clone(), next])
            .unwrap();
        assert_eq!(
            batch.iter().map(|e| e.nodes.len()).collect::<Vec<_>>(),
            [2, 2, 0]
        );
    }

    #[test]
    fn a_forgotten_cache_writes_the_history_again_under_the_same_ids() {
        let encoder = Encoder::default();
        let first = record("c", None, vec![Message::user("hi")], "hello");
        write(&encoder, &first);
        let next = second_turn();
        let warm = encoder.encode(std::slice::from_ref(&next)).unwrap().0;
        assert_eq!(warm[0].nodes.len(), 2, "the cache knew the first turn");
        assert!(warm[0].options.is_none(), "the cache knew the options");

        encoder.forget();
        let cold = write(&encoder, &next);
        assert_eq!(cold.nodes.len(), 4, "every message is serialised again");
        assert!(cold.options.is_some());
        assert_eq!(cold.head, warm[0].head, "content addresses do not change");
        // What the cold write committed is cached again.
        assert_eq!(write(&encoder, &next).nodes.len(), 0);
    }

    #[test]
    fn a_resent_history_adds_only_its_new_messages_with_or_without_a_conversation_id() {
        for same_conversation in [true, false] {
            let encoder = Encoder::default();
            let mut history = vec![Message::system("be brief")];
            let mut heads = Vec::new();
            for turn in 0..5 {
                history.push(Message::user(format!("question {turn}")));
                let conversation = if same_conversation {
                    "c".to_owned()
                } else {
                    format!("fresh-{turn}")
                };
                let r = record(
                    &conversation,
                    Some("alice"),
                    history.clone(),
                    &format!("answer {turn}"),
                );
                let encoded = write(&encoder, &r);
                // The first turn writes system + user + answer; later ones only the user message and answer.
                assert_eq!(
                    encoded.nodes.len(),
                    if turn == 0 { 3 } else { 2 },
                    "turn {turn}"
                );
                assert_eq!(encoded.options.is_some(), turn == 0);
                heads.push(encoded.head.unwrap());
                history.push(Message::assistant(format!("answer {turn}")));
            }
            // A cold cache computes the same ids: content addresses, not counters.
            let cold = write(
                &Encoder::default(),
                &record(
                    "other",
                    Some("alice"),
                    history[..history.len() - 1].to_vec(),
                    "answer 4",
                ),
            );
            assert_eq!(cold.head.as_ref(), heads.last());
            assert_eq!(cold.nodes.len(), history.len());
        }
    }

    #[test]
    fn callers_never_share_nodes_and_a_changed_message_branches() {
        let encoder = Encoder::default();
        let alice = write(
            &encoder,
            &record("a", Some("alice"), vec![Message::user("hi")], "hello"),
        );
        let bob = write(
            &encoder,
            &record("a", Some("bob"), vec![Message::user("hi")], "hello"),
        );
        assert_ne!(alice.nodes[0].id, bob.nodes[0].id);
        assert_eq!(bob.nodes.len(), 2, "bob's history is his own");
        // Same first message, different second: the branch shares the first node only.
        let edited = write(
            &encoder,
            &record(
                "a",
                Some("alice"),
                vec![
                    Message::user("hi"),
                    Message::assistant("hey"),
                    Message::user("x"),
                ],
                "y",
            ),
        );
        assert_eq!(edited.nodes.len(), 3);
        assert_eq!(edited.nodes[0].parent.as_ref(), Some(&alice.nodes[0].id));
    }

    #[test]
    fn conversations_with_large_media_leave_the_cache_within_its_byte_bound() {
        let encoder = Encoder::default();
        for n in 0..40u32 {
            // Distinct bytes each: 2 MiB of image per conversation, 80 MiB written in all.
            let mut image = vec![0u8; 2 << 20];
            image[..4].copy_from_slice(&n.to_le_bytes());
            let question = Message::user(vec![
                tower_chat::Part::text("what is this?"),
                tower_chat::Part::image(image, "image/png"),
            ]);
            let encoded = write(
                &encoder,
                &record(&format!("c{n}"), None, vec![question], "a chart"),
            );
            assert_eq!(encoded.blobs.len(), 1, "the image is stored");
            assert!(
                encoder.cached_bytes() <= 2 * ChainCache::BYTES,
                "after {} conversations the cache holds {} bytes",
                n + 1,
                encoder.cached_bytes()
            );
        }
        // Media are not what the cache keeps: forty chains of two messages are a few kilobytes.
        assert!(
            encoder.cached_bytes() < 64 << 10,
            "{}",
            encoder.cached_bytes()
        );
        // The cache still knows each chain: a resend adds only its new messages.
        let resent = write(
            &encoder,
            &record(
                "c39",
                None,
                vec![
                    Message::user(vec![
                        tower_chat::Part::text("what is this?"),
                        tower_chat::Part::image(
                            {
                                let mut image = vec![0u8; 2 << 20];
                                image[..4].copy_from_slice(&39u32.to_le_bytes());
                                image
                            },
                            "image/png",
                        ),
                    ]),
                    Message::assistant("a chart"),
                    Message::user("and the axis?"),
                ],
                "time",
            ),
        );
        assert_eq!(resent.nodes.len(), 2);
        assert!(resent.blobs.is_empty(), "the image was written before");
    }

    #[test]
    fn a_chain_is_trusted_for_an_hour_and_only_if_its_call_ended_recently() {
        let encoder = Encoder::default();
        let first = record("c", None, vec![Message::user("hi")], "hello");
        write(&encoder, &first);
        let cache = encoder.cache.lock().unwrap();
        let chain = cache.current.by_conversation.get("c").unwrap();
        assert!(chain.trusted());
        assert!(!chain.trusted_at(Instant::now() + CACHE_TRUST));
        drop(cache);

        // A record of a call that ended days ago (committed late) is not remembered at all.
        let encoder = Encoder::default();
        let mut late = first.clone();
        late.ended_at = SystemTime::now() - 3 * CACHE_TRUST;
        write(&encoder, &late);
        assert_eq!(write(&encoder, &late).nodes.len(), 2, "nothing was cached");
    }

    #[test]
    fn a_long_id_list_shares_prefixes_and_drops_without_recursion() {
        let mut head: Option<Arc<Ids>> = None;
        for i in 0..300_000 {
            head = Some(Arc::new(Ids {
                id: Arc::from(i.to_string()),
                len: i + 1,
                parent: head,
            }));
        }
        let head = head.unwrap();
        assert_eq!(&*prefix(&head, 3).unwrap().id, "2");
        assert!(prefix(&head, 0).is_none());
        let shared = prefix(&head, 1000).unwrap();
        drop(head);
        // The shared prefix outlives the longer list.
        assert_eq!((shared.len, &*shared.id), (1000, "999"));
    }

    #[test]
    fn ids_depend_on_the_database_key() {
        let r = record("c", None, vec![Message::user("hi")], "hello");
        let a = write(&Encoder::new(NodeKey(1, 2)), &r);
        let b = write(&Encoder::new(NodeKey(1, 2)), &r);
        let c = write(&Encoder::new(NodeKey(3, 4)), &r);
        assert_eq!(a.head, b.head);
        assert_ne!(a.head, c.head);
        assert_eq!(a.head.unwrap().len(), 32);
    }

    #[test]
    fn a_history_splits_at_the_request_length() {
        let messages = vec![Message::user("a"), Message::assistant("b")];
        let (request, response) = split_history(messages.clone(), 1, "c").unwrap();
        assert_eq!((request.len(), response.len()), (1, 1));
        assert!(split_history(messages, 3, "c").is_err());
    }
}
