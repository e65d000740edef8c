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
//! Computing ids needs each message's JSON, so the encoder keeps the chains it wrote recently in memory
//! ([`ChainCache`]): a record whose messages start with a cached chain (found by conversation id, or, for
//! stateless clients, by the chain's length and last message) reuses those ids after comparing the messages
//! (a comparison, no serialisation); only the messages past the shared prefix are serialised, hashed and
//! written. On a cold cache (after a restart) every message is serialised and hashed once, and the database
//! ignores the nodes it already has (`ON CONFLICT DO NOTHING`).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use siphasher::sip128::{Hasher128, SipHasher24};
use tower_chat::{ChatOptions, Message, Shared};

use crate::record::CallRecord;
use crate::store::blobs::{encode_message, NewBlob, RecentBlobs};
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

/// A 64-bit in-memory fingerprint of one message (never stored: it only indexes the cache, and a match is
/// confirmed by comparing messages). Hashes the role and the texts and ids, not the whole structure.
fn fingerprint(message: &Message) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match message {
        Message::System { content } => (0u8, content.joined_text(), content.size()).hash(&mut h),
        Message::User { content } => (1u8, content.joined_text(), content.size()).hash(&mut h),
        Message::Assistant(a) => {
            (2u8, &a.content).hash(&mut h);
            for call in &a.tool_calls {
                call.id.hash(&mut h);
            }
        }
        Message::Tool(t) => (3u8, &t.call_id, t.content.joined_text()).hash(&mut h),
    }
    h.finish()
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

/// A history the encoder wrote: the request's messages (shared with the request, not copied), the response's,
/// and the node ids.
#[derive(Debug)]
struct Chain {
    scope: Option<String>,
    request: Shared<Vec<Message>>,
    response: Vec<Message>,
    ids: Arc<Ids>,
}

impl Chain {
    fn len(&self) -> usize {
        self.ids.len
    }

    fn message(&self, i: usize) -> &Message {
        match self.request.get(i) {
            Some(m) => m,
            None => &self.response[i - self.request.len()],
        }
    }

    /// How many leading messages of `request ++ response` this chain shares.
    fn common_prefix(&self, request: &Shared<Vec<Message>>, response: &[Message]) -> usize {
        let total = request.len() + response.len();
        let limit = self.len().min(total);
        let mut i = 0;
        if Shared::ptr_eq(&self.request, request) {
            // The same request (a retried batch, an in-flight record and its final one): no comparison.
            i = self.request.len().min(limit);
        }
        while i < limit {
            let theirs = match request.get(i) {
                Some(m) => m,
                None => &response[i - request.len()],
            };
            if self.message(i) != theirs {
                break;
            }
            i += 1;
        }
        i
    }
}

type TailKey = (Option<String>, usize, u64);

#[derive(Debug, Default)]
struct Generation {
    by_conversation: HashMap<String, Arc<Chain>>,
    by_tail: HashMap<TailKey, Arc<Chain>>,
    messages: usize,
}

/// The chains written recently, in two generations: lookups search both, and when the current one holds more
/// than [`ChainCache::CAPACITY`] messages it becomes the previous one (the older is dropped). Memory is
/// bounded by about twice the capacity in messages (each chain counts its whole length, although it shares the
/// message vector of the request that carried it, and its ids with the chain it extends): 40,000 messages of
/// ~200 bytes are ~8 MB at most.
#[derive(Debug, Default)]
pub(crate) struct ChainCache {
    current: Generation,
    previous: Generation,
    options: Vec<(Shared<ChatOptions>, NodeId)>,
}

impl ChainCache {
    const CAPACITY: usize = 20_000;
    /// How many distinct option sets (tools offered included) are remembered.
    const OPTIONS: usize = 16;
    /// How far back from a request's end a stateless client's previous history may end.
    const TAIL_PROBES: usize = 8;

    fn by_conversation(&self, conversation: &str) -> Option<Arc<Chain>> {
        self.current
            .by_conversation
            .get(conversation)
            .or_else(|| self.previous.by_conversation.get(conversation))
            .cloned()
    }

    fn by_tail(&self, key: &TailKey) -> Option<Arc<Chain>> {
        self.current
            .by_tail
            .get(key)
            .or_else(|| self.previous.by_tail.get(key))
            .cloned()
    }

    /// The cached chain sharing the longest prefix with `request ++ response`, and that prefix's length.
    fn best_prefix(
        &self,
        conversation: &str,
        scope: Option<&str>,
        request: &Shared<Vec<Message>>,
        response: &[Message],
    ) -> Option<(Arc<Chain>, usize)> {
        let mut best: Option<(Arc<Chain>, usize)> = None;
        if let Some(chain) = self.by_conversation(conversation) {
            if chain.scope.as_deref() == scope {
                let shared = chain.common_prefix(request, response);
                if shared >= request.len() {
                    return Some((chain, shared));
                }
                best = Some((chain, shared));
            }
        }
        // A stateless client: its request starts with a history written before, which ends a few messages
        // before the request's end (the new user message, or tool results).
        let n = request.len();
        for len in (n.saturating_sub(Self::TAIL_PROBES).max(1)..=n).rev() {
            if best.as_ref().is_some_and(|(_, shared)| *shared >= len) {
                break;
            }
            let key = (
                scope.map(str::to_owned),
                len,
                fingerprint(&request[len - 1]),
            );
            if let Some(chain) = self.by_tail(&key) {
                let shared = chain.common_prefix(request, response);
                if best.as_ref().is_none_or(|(_, b)| shared > *b) {
                    best = Some((chain, shared));
                }
            }
        }
        best.filter(|(_, shared)| *shared > 0)
    }

    fn remember(&mut self, conversation: &str, chain: Arc<Chain>) {
        if self.current.messages > Self::CAPACITY {
            self.previous = std::mem::take(&mut self.current);
        }
        // Indexed by where the history ends, and by where its request ends: a client may resend the
        // request's messages and an answer that differs from the recorded one (a dropped reasoning text).
        for len in [chain.request.len(), chain.len()] {
            if len > 0 {
                let key = (
                    chain.scope.clone(),
                    len,
                    fingerprint(chain.message(len - 1)),
                );
                self.current.by_tail.insert(key, chain.clone());
            }
        }
        self.current.messages += chain.len();
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
        // Dropped after the locks are released: freeing 40,000 messages must not hold up a concurrent encode.
        drop((cache, blobs));
    }

    /// The batch was committed: its chains and options may be reused.
    pub(crate) fn committed(&self, pending: Pending) {
        if !pending.blobs.is_empty() {
            let mut blobs = self.blobs.lock().unwrap_or_else(|e| e.into_inner());
            for hash in pending.blobs {
                blobs.remember(hash);
            }
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        for (options, id) in pending.options {
            if cache.options(&options).is_none() {
                cache.remember_options(options, id);
            }
        }
        for (conversation, chain) in pending.chains {
            cache.remember(&conversation, chain);
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

    let mut known = cache.best_prefix(conversation, scope, request, response);
    // A chain written earlier in this batch (an in-flight record and its final one, a tool loop's rounds).
    for (c, chain) in pending.chains.iter().rev() {
        if c == conversation && chain.scope.as_deref() == scope {
            let shared = chain.common_prefix(request, response);
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
                request: request.clone(),
                response: response.to_vec(),
                ids,
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
            round_index: 0,
            started_at: std::time::UNIX_EPOCH,
            first_token_at: None,
            ended_at: std::time::UNIX_EPOCH,
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
