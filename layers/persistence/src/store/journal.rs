//! The record journal: where a record becomes durable before SQLite indexes it.
//!
//! A SQLite commit costs more than a record's own rows: it writes every page the record touched (~5 of 4 KiB for
//! a two-message record) to the write-ahead log and checksums them, whether one record or a hundred share the
//! transaction. A caller alone on the store would pay that once per record. So a batch of records is first
//! appended to a file of its own beside the database (one `write`), which is what the layer waits for; the
//! connection thread then writes the records into the tables in transactions of [`INDEX_BATCH`] records, once
//! that many are waiting or the store has been idle for [`INDEX_DELAY`] (1 s), and before any other operation on
//! the connection (so every read through the store sees every record written before it). The journal is two
//! files, `<database>-records` and `<database>-records-alt`, used in turn (see `appender.rs`): one is emptied once
//! its records are committed while the other takes the appends.
//!
//! What survives: an appended batch is in the operating system's cache when the append returns, so it survives
//! the process being killed, like a commit in WAL mode with `synchronous = NORMAL`; the next open replays the
//! journal into the tables (replaying a record the tables already hold changes nothing: a final record is never
//! overwritten, see [`super::Store::write_calls`]). With [`super::sqlite::Durability::PowerLoss`] every append is
//! synced before it returns. A batch cut short (a power loss mid-append) fails its checksum and is ignored with
//! everything after it; it was never acknowledged.
//!
//! One store at a time holds the journal (an exclusive lock on the file); a second store on the same database,
//! in this process or another, commits its records to the tables directly, as every store did before.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::chain::{Encoded, NewNode, NewOptions};
use super::schema::Row;
use crate::record::CallOutcome;

/// Records waiting for the tables at most: more are indexed at once (one transaction). A transaction of 128
/// costs ~8 k instructions a record less than one of 16 (fewer pages of log per record). It does not hold up the
/// calls ending meanwhile: their writer tasks append to the journal's other file (`appender.rs`); when the
/// transaction ran on the thread that also appended, 128 raised the gateway's p99 at one connection by ~0.7 ms
/// (BENCHMARKS.md, "Persistence").
pub(super) const INDEX_BATCH: usize = 128;

/// Records one index transaction takes at most, those arriving during it included, and records waiting for the
/// tables at most before the writer task hands its batches to the connection thread (which indexes before it
/// appends): a store the tables cannot keep up with slows its callers down instead of growing its journal
/// without bound.
pub(super) const MAX_TRANSACTION: usize = 4 * INDEX_BATCH;

/// How long records wait for the tables while nothing else reaches the store, unless
/// [`super::sqlite::SqliteStoreBuilder::index_delay`] says otherwise. Long enough that records a few
/// milliseconds apart share a transaction whatever the traffic (a short idle delay gave a transaction per record
/// to any caller slower than it, and made instruction counts under valgrind depend on its slowdown); short
/// enough that another process reading the file is at most a second behind.
pub(super) const INDEX_DELAY: Duration = Duration::from_secs(1);

/// The version of the entry layout, first byte of every entry's payload. Format 2 dropped the answer's text
/// (kept in the answer's message node); format 3 added, after a record's options, whether its usage is an
/// estimate and an omitted request's size. Entries of formats 1 and 2 still replay.
const FORMAT: u8 = 3;

/// Bytes before an entry's payload: its length (u32) and checksum (u64), little-endian.
const HEADER: usize = 4 + 8;

/// The journal file of one database, locked by this store.
pub(super) struct Journal {
    file: File,
    /// Bytes of whole entries in the file: where the next one starts.
    len: u64,
    sync: bool,
    scratch: Vec<u8>,
}

/// What the last process left in the journal: batches it acknowledged that may not be in the tables.
pub(super) type Replay = Vec<(Row, Encoded)>;

impl Journal {
    /// The journal beside the database file `database`.
    pub(super) fn path(database: &Path) -> PathBuf {
        let mut path = database.as_os_str().to_owned();
        path.push("-records");
        PathBuf::from(path)
    }

    /// The journal's second file, which takes the appends while the first one's records are being written into
    /// the tables (and the other way round).
    pub(super) fn alternate_path(database: &Path) -> PathBuf {
        let mut path = database.as_os_str().to_owned();
        path.push("-records-alt");
        PathBuf::from(path)
    }

    /// Open and lock the journal of `database` (its two files, [`Journal::path`] and
    /// [`Journal::alternate_path`]), and read what they hold. `Ok(None)` when another store holds it. `sync`:
    /// every append waits for the disk.
    pub(super) fn open(
        database: &Path,
        sync: bool,
    ) -> io::Result<Option<(Journal, Journal, Replay)>> {
        let file = Self::open_file(&Self::path(database))?;
        // The first file's lock covers both: only its holder opens the second.
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => return Err(e),
        }
        let (first, mut replay) = Self::read(file, sync)?;
        let (second, more) = Self::read(Self::open_file(&Self::alternate_path(database))?, sync)?;
        // Replaying is idempotent and order-free (a final record is never overwritten), so the files' order does
        // not matter.
        replay.extend(more);
        Ok(Some((first, second, replay)))
    }

    fn open_file(path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
    }

    /// A journal file's whole entries; an incomplete or damaged tail is cut off.
    fn read(file: File, sync: bool) -> io::Result<(Journal, Replay)> {
        let mut bytes = Vec::new();
        (&file).read_to_end(&mut bytes)?;
        let (replay, whole) = decode_entries(&bytes);
        let journal = Journal {
            file,
            len: whole as u64,
            sync,
            scratch: Vec::new(),
        };
        if whole < bytes.len() {
            tracing::warn!(
                ignored_bytes = bytes.len() - whole,
                "the record journal ends with an incomplete batch (never acknowledged); it is ignored"
            );
            journal.file.set_len(journal.len)?;
        }
        Ok((journal, replay))
    }

    /// Whether every append waits for the disk.
    pub(super) fn syncs(&self) -> bool {
        self.sync
    }

    /// Whether the file holds no entry.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `rows` as one entry: durable (to the journal's promise) when this returns `Ok`. On an error the
    /// file is cut back to its previous length, so no partial entry stays in front of the next one.
    pub(super) fn append(&mut self, rows: &[(Row, Encoded)]) -> io::Result<()> {
        let mut entry = std::mem::take(&mut self.scratch);
        entry.clear();
        entry.extend_from_slice(&[0; HEADER]);
        entry.push(FORMAT);
        put_u32(&mut entry, rows.len() as u32);
        for (row, encoded) in rows {
            encode_record(&mut entry, row, encoded);
        }
        let payload = &entry[HEADER..];
        let length = u32::try_from(payload.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a batch over 4 GiB"))?;
        let checksum = checksum(payload);
        entry[..4].copy_from_slice(&length.to_le_bytes());
        entry[4..HEADER].copy_from_slice(&checksum.to_le_bytes());
        let written = self.file.write_all(&entry).and_then(|()| {
            if self.sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        match written {
            Ok(()) => self.len += entry.len() as u64,
            Err(_) => {
                // Best effort: should the cut fail too, replay would stop at the torn entry (its checksum) and
                // miss what follows it, so the caller commits this batch to the tables and empties the journal,
                // or stops using it (store/sqlite.rs, `serve_write`).
                let _ = self.file.set_len(self.len);
            }
        }
        self.scratch = entry;
        written
    }

    /// Empty the journal: every entry is in the tables.
    pub(super) fn clear(&mut self) -> io::Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        self.file.set_len(0)?;
        self.len = 0;
        Ok(())
    }
}

/// A 64-bit checksum of an entry's payload, to tell a whole entry from a torn or damaged one (not an
/// adversary's forgery: whoever can write the journal can write the database). Eight bytes a step, each step a
/// bijection of the state for a given word, so a changed word always changes the state it leaves; about a
/// sixth of what SipHash costs per byte, which was ~4 k instructions a record.
fn checksum(payload: &[u8]) -> u64 {
    const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;
    let step = |state: u64, word: u64| (state ^ word).wrapping_mul(MULTIPLIER).rotate_left(29);
    let mut words = payload.chunks_exact(8);
    let mut state = step(0x7463_6a6f_7572_6e31, payload.len() as u64);
    for word in &mut words {
        state = step(state, u64::from_le_bytes(word.try_into().expect("8 bytes")));
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    state = step(state, u64::from_le_bytes(last));
    // Spread the last words over every bit.
    state ^= state >> 32;
    state = state.wrapping_mul(MULTIPLIER);
    state ^ (state >> 29)
}

/// The records of every whole, valid entry at the start of `bytes`, and how many bytes those entries take.
fn decode_entries(bytes: &[u8]) -> (Replay, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while let Some(header) = bytes.get(at..at + HEADER) {
        let length = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let checksum_read = u64::from_le_bytes(header[4..].try_into().expect("8 bytes"));
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + length) else {
            break;
        };
        if checksum(payload) != checksum_read {
            break;
        }
        let Some(batch) = decode_batch(payload) else {
            break;
        };
        records.extend(batch);
        at += HEADER + length;
    }
    (records, at)
}

fn decode_batch(payload: &[u8]) -> Option<Vec<(Row, Encoded)>> {
    let mut input = Input(payload);
    let format = input.u8()?;
    if !(1..=FORMAT).contains(&format) {
        return None;
    }
    let count = input.u32()? as usize;
    let mut records = Vec::with_capacity(count.min(payload.len()));
    for _ in 0..count {
        records.push(decode_record(&mut input, format)?);
    }
    input.0.is_empty().then_some(records)
}

fn encode_record(out: &mut Vec<u8>, r: &Row, encoded: &Encoded) {
    put_str(out, &r.call_id);
    put_str(out, &r.conversation_id);
    put_opt_str(out, r.caller.as_deref());
    put_i64(out, r.round_index);
    put_i64(out, r.started_at);
    put_opt_i64(out, r.first_token_at);
    put_i64(out, r.ended_at);
    put_opt_str(out, r.provider.as_deref());
    put_opt_str(out, r.model.as_deref());
    put_str(out, r.status);
    put_opt_str(out, r.error_kind.as_deref());
    put_opt_str(out, r.error_message.as_deref());
    put_opt_str(out, r.finish_reason.as_deref());
    put_i64(out, r.input_tokens);
    put_i64(out, r.output_tokens);
    put_str(out, &r.response);
    put_opt_i64(out, r.cost_nanos);
    put_opt_str(out, r.history_head.as_deref());
    put_i64(out, r.request_len);
    put_str(out, &r.options_id);
    put_u32(out, encoded.nodes.len() as u32);
    for node in &encoded.nodes {
        put_str(out, &node.id);
        put_opt_str(out, node.parent.as_deref());
        put_i64(out, node.position);
        put_str(out, &node.message);
    }
    match &encoded.options {
        Some(options) => {
            out.push(1);
            put_str(out, &options.id);
            put_str(out, &options.json);
        }
        None => out.push(0),
    }
    out.push(u8::from(r.usage_estimated));
    put_opt_i64(out, r.omitted_messages);
    put_opt_i64(out, r.omitted_bytes);
}

fn decode_record(input: &mut Input<'_>, format: u8) -> Option<(Row, Encoded)> {
    let row = Row {
        call_id: input.string()?,
        conversation_id: input.string()?,
        caller: input.opt_string()?,
        round_index: input.i64()?,
        started_at: input.i64()?,
        first_token_at: input.opt_i64()?,
        ended_at: input.i64()?,
        provider: input.opt_string()?,
        model: input.opt_string()?,
        status: status_name(input.str()?)?,
        error_kind: input.opt_string()?,
        error_message: input.opt_string()?,
        finish_reason: input.opt_string()?,
        input_tokens: input.i64()?,
        output_tokens: input.i64()?,
        response: {
            if format == 1 {
                // The answer's text, which the tables no longer keep.
                input.str()?;
            }
            input.string()?
        },
        cost_nanos: input.opt_i64()?,
        history_head: input.opt_string()?,
        request_len: input.i64()?,
        options_id: input.string()?,
        usage_estimated: false,
        omitted_messages: None,
        omitted_bytes: None,
    };
    let count = input.u32()? as usize;
    let mut nodes = Vec::with_capacity(count.min(input.0.len()));
    for _ in 0..count {
        nodes.push(NewNode {
            id: Arc::from(input.str()?),
            parent: input.opt_str()?.map(Arc::from),
            position: input.i64()?,
            message: input.string()?,
        });
    }
    let options = match input.u8()? {
        0 => None,
        1 => Some(NewOptions {
            id: Arc::from(input.str()?),
            json: input.string()?,
        }),
        _ => return None,
    };
    let mut row = row;
    if format >= 3 {
        row.usage_estimated = match input.u8()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        row.omitted_messages = input.opt_i64()?;
        row.omitted_bytes = input.opt_i64()?;
    }
    let encoded = Encoded {
        head: row.history_head.as_deref().map(Arc::from),
        request_len: row.request_len,
        nodes,
        options_id: Arc::from(row.options_id.as_str()),
        options,
    };
    Some((row, encoded))
}

/// The `&'static` name of a stored status (rows carry the outcome's own name).
fn status_name(name: &str) -> Option<&'static str> {
    [
        CallOutcome::Completed,
        CallOutcome::Cancelled,
        CallOutcome::InFlight,
        CallOutcome::Interrupted { error: None },
    ]
    .iter()
    .map(CallOutcome::as_str)
    .chain(["failed"])
    .find(|known| *known == name)
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_opt_i64(out: &mut Vec<u8>, value: Option<i64>) {
    match value {
        Some(value) => {
            out.push(1);
            put_i64(out, value);
        }
        None => out.push(0),
    }
}

fn put_str(out: &mut Vec<u8>, value: &str) {
    put_u32(out, value.len() as u32);
    out.extend_from_slice(value.as_bytes());
}

/// `None` is written as a length no string can have.
fn put_opt_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => put_str(out, value),
        None => put_u32(out, u32::MAX),
    }
}

/// A cursor over an entry's payload; every read is `None` past its end or on a malformed value.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn opt_i64(&mut self) -> Option<Option<i64>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(self.i64()?)),
            _ => None,
        }
    }

    fn str(&mut self) -> Option<&'a str> {
        let len = self.u32()?;
        std::str::from_utf8(self.take(len as usize)?).ok()
    }

    fn string(&mut self) -> Option<String> {
        self.str().map(str::to_owned)
    }

    fn opt_str(&mut self) -> Option<Option<&'a str>> {
        if self.0.get(..4)? == u32::MAX.to_le_bytes() {
            self.0 = &self.0[4..];
            return Some(None);
        }
        self.str().map(Some)
    }

    fn opt_string(&mut self) -> Option<Option<String>> {
        Some(self.opt_str()?.map(str::to_owned))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED: u64 = 0xb18e_5202_4973_d236;
    const PINNED_EMPTY: u64 = 0x712f_de70_ee15_001e;
    const PINNED_ENTRY: (usize, u64) = (445, 0x9fa9_e34a_9a89_6250);

    fn record(n: i64, caller: Option<&str>) -> (Row, Encoded) {
        let row = Row {
            call_id: format!("call-{n}"),
            conversation_id: "conversation".into(),
            caller: caller.map(str::to_owned),
            round_index: n,
            started_at: 1_000 + n,
            first_token_at: (n % 2 == 0).then_some(1_001 + n),
            ended_at: 1_002 + n,
            provider: Some("openai".into()),
            model: None,
            status: if n % 3 == 0 { "failed" } else { "completed" },
            error_kind: (n % 3 == 0).then(|| "upstream".to_owned()),
            error_message: Some(String::new()),
            finish_reason: None,
            input_tokens: -n,
            output_tokens: i64::MAX,
            response: "{}".into(),
            cost_nanos: None,
            history_head: Some(format!("{n:032x}")),
            request_len: 2,
            options_id: "o".repeat(32),
            usage_estimated: n % 2 == 0,
            omitted_messages: (n == 2).then_some(7),
            omitted_bytes: (n == 2).then_some(3_000_000),
        };
        let encoded = Encoded {
            head: row.history_head.as_deref().map(Arc::from),
            request_len: 2,
            nodes: (0..n)
                .map(|p| NewNode {
                    id: Arc::from(format!("{p:032x}")),
                    parent: (p > 0).then(|| Arc::from(format!("{:032x}", p - 1))),
                    position: p,
                    message: format!("{{\"role\":\"user\",\"content\":\"{p}\"}}"),
                })
                .collect(),
            options_id: Arc::from("o".repeat(32)),
            options: (n == 1).then(|| NewOptions {
                id: Arc::from("o".repeat(32)),
                json: "{\"tools\":[]}".into(),
            }),
        };
        (row, encoded)
    }

    fn same(a: &[(Row, Encoded)], b: &[(Row, Encoded)]) {
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    #[test]
    fn batches_come_back_whole_and_in_order_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("j.db");
        let (mut journal, _alternate, replay) = Journal::open(&database, false).unwrap().unwrap();
        assert!(replay.is_empty());
        let first = vec![record(1, Some("alice")), record(2, None)];
        let second = vec![record(3, None)];
        journal.append(&first).unwrap();
        journal.append(&second).unwrap();
        drop(journal);
        let (_journal, _alternate, replay) = Journal::open(&database, false).unwrap().unwrap();
        let both: Vec<_> = first.into_iter().chain(second).collect();
        same(&replay, &both);
    }

    #[test]
    fn a_cleared_journal_replays_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("j.db");
        let (mut journal, _alternate, _) = Journal::open(&database, true).unwrap().unwrap();
        journal.append(&[record(1, None)]).unwrap();
        journal.clear().unwrap();
        journal.append(&[record(2, None)]).unwrap();
        drop(journal);
        let (_journal, _alternate, replay) = Journal::open(&database, false).unwrap().unwrap();
        same(&replay, &[record(2, None)]);
    }

    #[test]
    fn a_torn_or_damaged_batch_and_what_follows_it_are_ignored_and_cut() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("j.db");
        let path = Journal::path(&database);
        let (mut journal, _alternate, _) = Journal::open(&database, false).unwrap().unwrap();
        journal.append(&[record(1, None)]).unwrap();
        let whole = std::fs::metadata(&path).unwrap().len();
        journal.append(&[record(2, None), record(4, None)]).unwrap();
        drop(journal);
        let full = std::fs::read(&path).unwrap();
        // Every cut inside the second batch leaves the first one alone.
        for cut in [whole + 1, whole + HEADER as u64, full.len() as u64 - 1] {
            std::fs::write(&path, &full[..cut as usize]).unwrap();
            let (_journal, _alternate, replay) = Journal::open(&database, false).unwrap().unwrap();
            same(&replay, &[record(1, None)]);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        }
        // A flipped byte fails the checksum.
        let mut damaged = full.clone();
        damaged[whole as usize + HEADER + 10] ^= 1;
        std::fs::write(&path, &damaged).unwrap();
        let (_journal, _alternate, replay) = Journal::open(&database, false).unwrap().unwrap();
        same(&replay, &[record(1, None)]);
    }

    #[test]
    fn every_flipped_bit_zeroed_tail_or_extra_zero_changes_the_checksum() {
        let payload: Vec<u8> = (0..=100u8).collect();
        let whole = checksum(&payload);
        for bit in 0..payload.len() * 8 {
            let mut damaged = payload.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(checksum(&damaged), whole, "bit {bit}");
        }
        let mut zeroed = payload.clone();
        zeroed[50..].fill(0);
        assert_ne!(checksum(&zeroed), whole);
        let mut longer = payload.clone();
        longer.push(0);
        assert_ne!(checksum(&longer), whole);
    }

    /// A journal written by an earlier build must replay after an upgrade: the checksum of a given payload and
    /// the bytes of a given entry never change (a new layout takes a new `FORMAT` and keeps decoding the old).
    #[test]
    fn the_checksum_and_the_entry_layout_are_pinned() {
        let payload: Vec<u8> = (0..=100u8).collect();
        assert_eq!(checksum(&payload), PINNED, "{:#018x}", checksum(&payload));
        assert_eq!(checksum(b""), PINNED_EMPTY, "{:#018x}", checksum(b""));
        // And so does the layout of an entry.
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("j.db");
        let (mut journal, _alternate, _) = Journal::open(&database, false).unwrap().unwrap();
        journal.append(&[record(2, Some("alice"))]).unwrap();
        let bytes = std::fs::read(Journal::path(&database)).unwrap();
        assert_eq!(bytes.len(), PINNED_ENTRY.0, "{}", bytes.len());
        assert_eq!(
            checksum(&bytes),
            PINNED_ENTRY.1,
            "{:#018x}",
            checksum(&bytes)
        );
    }

    /// The record of format 2 and before: no estimate flag, no omitted request.
    fn before_format_3(n: i64, caller: Option<&str>) -> (Row, Encoded) {
        let (mut row, encoded) = record(n, caller);
        row.usage_estimated = false;
        row.omitted_messages = None;
        row.omitted_bytes = None;
        (row, encoded)
    }

    /// The same record as written by the build before format 2 (which also carried the answer's text,
    /// "héllo" twice): a journal left by a process of that build replays after the upgrade.
    #[test]
    fn an_entry_of_format_1_still_replays() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("j.db");
        let format_1 = include_bytes!("../../tests/data/journal-format-1.bin");
        assert_eq!(format_1[HEADER], 1);
        std::fs::write(Journal::path(&database), format_1).unwrap();
        let (_journal, _alternate, replay) = Journal::open(&database, false).unwrap().unwrap();
        same(&replay, &[before_format_3(2, Some("alice"))]);
    }

    /// The same record as written by the build before format 3 (the entry the layout test pinned then: 426
    /// bytes): it replays after the upgrade, as an exact, stored request.
    #[test]
    fn an_entry_of_format_2_still_replays() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("j.db");
        let format_2 = include_bytes!("../../tests/data/journal-format-2.bin");
        assert_eq!(format_2[HEADER], 2);
        assert_eq!(format_2.len(), 426);
        std::fs::write(Journal::path(&database), format_2).unwrap();
        let (_journal, _alternate, replay) = Journal::open(&database, false).unwrap().unwrap();
        same(&replay, &[before_format_3(2, Some("alice"))]);
    }

    #[test]
    fn one_store_at_a_time_holds_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("j.db");
        let held = Journal::open(&database, false).unwrap().unwrap();
        assert!(Journal::open(&database, false).unwrap().is_none());
        drop(held);
        assert!(Journal::open(&database, false).unwrap().is_some());
    }
}
