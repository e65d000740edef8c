//! The upgrade path from the record journal of earlier builds: read what one left beside a database, once.
//!
//! Earlier builds made a record durable by appending it to a journal beside the database (`<file>-records` and
//! `<file>-records-alt`) and wrote it into the tables later. A process of such a build that was killed, or an
//! upgrade with records still waiting, leaves acknowledged records there. [`SqliteStore`] opening the
//! database reads them with this module, commits them to the tables, and removes the files: afterwards the
//! database carries no trace of the journal, and this module has nothing more to do.
//!
//! The layout read here is the journal's last one (format 3). An entry is its payload's length (`u32`) and
//! checksum (`u64`), little-endian, then the payload: the format byte, the number of records (`u32`), and each
//! record's `chat_calls` columns, its new message nodes and its new options (see [`decode_record`]). An entry
//! cut short or failing its checksum (a process killed mid-append) was never acknowledged: it and whatever
//! follows are ignored, as the journal's own reader did. A whole entry of another format is refused with an
//! error naming it rather than skipped, so no acknowledged record is lost silently.
//!
//! Replaying is safe to repeat (a process killed after the commit and before the files are gone replays them
//! again): a final record is never overwritten, see [`super::Store::write_calls`].
//!
//! [`SqliteStore`]: super::sqlite::SqliteStore

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::chain::{Encoded, NewNode, NewOptions};
use super::schema::Row;
use super::StoreError;
use crate::record::CallOutcome;

/// The only entry layout this reader knows: the last one the journal wrote.
const FORMAT: u8 = 3;

/// Bytes before an entry's payload: its length (u32) and checksum (u64), little-endian.
const HEADER: usize = 4 + 8;

/// A journal left beside a database: its records, and its files (locked while this value lives).
pub(super) struct LegacyJournal {
    /// The records of every whole entry, in the order they were appended.
    pub(super) records: Vec<(Row, Encoded)>,
    files: [PathBuf; 2],
    /// The first file, locked: a process of an earlier build holds the same lock while it uses the journal.
    _lock: File,
}

impl LegacyJournal {
    /// The journal beside `database`, read: `None` when there is none, or when a running process of an earlier
    /// build still holds it (it writes the records into the tables itself; the files stay).
    pub(super) fn open(database: &Path) -> Result<Option<LegacyJournal>, StoreError> {
        let files = [
            suffixed(database, "-records"),
            suffixed(database, "-records-alt"),
        ];
        if !files.iter().any(|file| file.exists()) {
            return Ok(None);
        }
        let failed = |file: &Path| {
            let file = file.display().to_string();
            move |e: io::Error| {
                StoreError::with_source(format!("cannot read the record journal {file}"), e)
            }
        };
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&files[0])
            .map_err(failed(&files[0]))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                tracing::warn!(
                    journal = %files[0].display(),
                    "a process of an earlier build holds this database's record journal; it is left to that process"
                );
                return Ok(None);
            }
            Err(TryLockError::Error(e)) => return Err(failed(&files[0])(e)),
        }
        let mut records = Vec::new();
        for file in &files {
            let mut bytes = Vec::new();
            match File::open(file) {
                Ok(mut f) => f.read_to_end(&mut bytes).map_err(failed(file))?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(failed(file)(e)),
            };
            let (entries, whole) = decode_entries(&bytes).map_err(|e| {
                StoreError::new(format!("the record journal {}: {e}", file.display()))
            })?;
            if whole < bytes.len() {
                tracing::warn!(
                    journal = %file.display(),
                    ignored_bytes = bytes.len() - whole,
                    "the record journal ends with an incomplete batch (never acknowledged); it is ignored"
                );
            }
            // The two files' order does not matter: replaying is idempotent and order-free.
            records.extend(entries);
        }
        Ok(Some(LegacyJournal {
            records,
            files,
            _lock: lock,
        }))
    }

    /// Remove the journal's files: call once its records are committed.
    pub(super) fn remove(self) -> Result<(), StoreError> {
        for file in &self.files {
            match std::fs::remove_file(file) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(StoreError::with_source(
                        format!("cannot remove the record journal {}", file.display()),
                        e,
                    ))
                }
            }
        }
        Ok(())
    }
}

fn suffixed(database: &Path, suffix: &str) -> PathBuf {
    let mut path = database.as_os_str().to_owned();
    path.push(suffix);
    PathBuf::from(path)
}

/// The checksum the journal wrote with each entry (a word-at-a-time multiply-rotate hash), to tell a whole
/// entry from a torn one.
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
    state ^= state >> 32;
    state = state.wrapping_mul(MULTIPLIER);
    state ^ (state >> 29)
}

/// The records of every whole entry at the start of `bytes`, and how many bytes those entries take; an error
/// for a whole entry (its checksum right) that does not decode.
fn decode_entries(bytes: &[u8]) -> Result<(Vec<(Row, Encoded)>, usize), String> {
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
        let (&format, batch) = payload
            .split_first()
            .ok_or_else(|| format!("the entry at byte {at} is empty"))?;
        if format != FORMAT {
            return Err(format!(
                "the entry at byte {at} has format {format}, which this build cannot read (only {FORMAT}); \
                 open the database once with the build that wrote it"
            ));
        }
        let batch =
            decode_batch(batch).ok_or_else(|| format!("the entry at byte {at} does not decode"))?;
        records.extend(batch);
        at += HEADER + length;
    }
    Ok((records, at))
}

fn decode_batch(payload: &[u8]) -> Option<Vec<(Row, Encoded)>> {
    let mut input = Input(payload);
    let count = input.u32()? as usize;
    let mut records = Vec::with_capacity(count.min(payload.len()));
    for _ in 0..count {
        records.push(decode_record(&mut input)?);
    }
    input.0.is_empty().then_some(records)
}

/// One record: the `chat_calls` columns in table order, the new message nodes, the new options, then whether
/// its usage is an estimate and the size of an omitted request.
fn decode_record(input: &mut Input<'_>) -> Option<(Row, Encoded)> {
    let mut row = Row {
        call_id: input.string()?,
        conversation_id: input.string()?,
        caller: input.opt_string()?,
        team: None,
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
        cached_input_tokens: 0,
        response: input.string()?,
        cost_nanos: input.opt_i64()?,
        history_head: input.opt_string()?,
        request_len: input.i64()?,
        options_id: input.string()?,
        usage_estimated: false,
        omitted_messages: None,
        omitted_bytes: None,
        // The journal has no decoded record: the open indexes these rows once they are in the table.
        first_message: None,
        search_text: String::new(),
    };
    // For the spend rollup: the journal has it only inside the response column.
    row.cached_input_tokens = serde_json::from_str::<serde_json::Value>(&row.response)
        .ok()
        .and_then(|r| r["usage"]["cached_input_tokens"].as_i64())
        .unwrap_or(0);
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
    row.usage_estimated = match input.u8()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    row.omitted_messages = input.opt_i64()?;
    row.omitted_bytes = input.opt_i64()?;
    let encoded = Encoded {
        head: row.history_head.as_deref().map(Arc::from),
        request_len: row.request_len,
        nodes,
        options_id: Arc::from(row.options_id.as_str()),
        options,
        // The journal predates blob storage: its messages carry their bytes inline.
        blobs: Vec::new(),
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

    /// `None` was written as a length no string can have.
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

    /// An entry with a right checksum around `payload`.
    fn entry(payload: &[u8]) -> Vec<u8> {
        let mut bytes = (payload.len() as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&checksum(payload).to_le_bytes());
        bytes.extend_from_slice(payload);
        bytes
    }

    /// A whole entry this reader cannot decode held acknowledged records: it is an error naming what is wrong,
    /// never skipped.
    #[test]
    fn a_whole_entry_that_does_not_decode_is_an_error() {
        let error = decode_entries(&entry(&[2, 0, 0, 0, 0])).unwrap_err();
        assert!(error.contains("format 2"), "{error}");
        let error = decode_entries(&entry(&[FORMAT, 1, 0, 0, 0])).unwrap_err();
        assert!(error.contains("does not decode"), "{error}");
        let error = decode_entries(&entry(&[])).unwrap_err();
        assert!(error.contains("empty"), "{error}");
    }

    /// An entry of no records decodes; a damaged one and whatever follows it are left out.
    #[test]
    fn decoding_stops_at_a_damaged_entry() {
        let whole = entry(&[FORMAT, 0, 0, 0, 0]);
        let mut bytes = [whole.clone(), whole.clone(), whole.clone()].concat();
        let (records, at) = decode_entries(&bytes).unwrap();
        assert!(records.is_empty());
        assert_eq!(at, bytes.len());
        bytes[whole.len() + HEADER] ^= 0x40;
        assert_eq!(decode_entries(&bytes).unwrap().1, whole.len());
    }
}
