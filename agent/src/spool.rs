//! On-disk spool of batches waiting for the server.
//!
//! Every batch is written here before it is sent and deleted only after the server's 200, so
//! an outage or a restart loses nothing. One file per batch, holding the exact request body,
//! named `<seq>-<samples>.pb.zst` (protobuf, zstd) or `<seq>-<samples>.json.gz` (gzip JSON:
//! `--wire-format json`, and what older agents left): `seq` increases monotonically, so the
//! lexical order of names is the send order (oldest first), and the sample count and format
//! are known without reading the file. A file is written under a temporary name, fsync'd, then renamed (and the
//! directory fsync'd), so a crash leaves either the whole batch or only a `.tmp` that the
//! next start removes. Batches the server refuses for good go to `rejected/` with the reason.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::wire::WireFormat;

const TMP_SUFFIX: &str = ".tmp";
pub const REJECTED_DIR: &str = "rejected";

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("spool task failed: {0}")]
    Task(String),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io { path: path.to_path_buf(), source }
}

/// A batch waiting in the spool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub seq: u64,
    pub samples: usize,
    pub bytes: u64,
    /// How the body is written, hence how it is sent.
    pub format: WireFormat,
}

/// What a push had to drop to stay under the size bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PushOutcome {
    pub seq: u64,
    pub dropped_batches: usize,
    pub dropped_samples: usize,
}

#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    entries: BTreeMap<u64, Entry>,
    total_bytes: u64,
    next_seq: u64,
    dropped_samples_total: u64,
}

fn file_name(seq: u64, samples: usize, format: WireFormat) -> String {
    format!("{seq:020}-{samples}{}", format.spool_suffix())
}

fn parse_name(name: &str) -> Option<(u64, usize, WireFormat)> {
    let (stem, format) = WireFormat::ALL.iter().find_map(|&f| Some((name.strip_suffix(f.spool_suffix())?, f)))?;
    let (seq, samples) = stem.split_once('-')?;
    Some((seq.parse().ok()?, samples.parse().ok()?, format))
}

/// Makes a rename or removal in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))
}

impl Spool {
    /// Opens (creating if needed) the spool in `dir`, indexing what an earlier run left and
    /// removing half-written files.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Self, SpoolError> {
        let rejected = dir.join(REJECTED_DIR);
        fs::create_dir_all(&rejected).map_err(io_err(&rejected))?;
        let mut entries = BTreeMap::new();
        let mut total_bytes = 0;
        for item in fs::read_dir(dir).map_err(io_err(dir))? {
            let item = item.map_err(io_err(dir))?;
            let name = item.file_name().to_string_lossy().into_owned();
            let path = item.path();
            if name.ends_with(TMP_SUFFIX) {
                // A write interrupted by a crash: its batch was never acknowledged as
                // spooled, and the collector had not yet let go of it.
                tracing::warn!(file = %path.display(), "removing a half-written spool file");
                fs::remove_file(&path).map_err(io_err(&path))?;
            } else if let Some((seq, samples, format)) = parse_name(&name) {
                let bytes = item.metadata().map_err(io_err(&path))?.len();
                entries.insert(seq, Entry { seq, samples, bytes, format });
                total_bytes += bytes;
            } else if name != REJECTED_DIR {
                tracing::warn!(file = %path.display(), "ignoring a file the spool did not write");
            }
        }
        // Sequence numbers continue after every name ever used, rejected ones included, so
        // a rejected file is never overwritten.
        let mut max_seq = entries.keys().next_back().copied().unwrap_or(0);
        for item in fs::read_dir(&rejected).map_err(io_err(&rejected))? {
            let name = item.map_err(io_err(&rejected))?.file_name();
            if let Some((seq, _, _)) = parse_name(&name.to_string_lossy()) {
                max_seq = max_seq.max(seq);
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            max_bytes,
            entries,
            total_bytes,
            next_seq: max_seq + 1,
            dropped_samples_total: 0,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn rejected_dir(&self) -> PathBuf {
        self.dir.join(REJECTED_DIR)
    }

    pub fn path_of(&self, e: &Entry) -> PathBuf {
        self.dir.join(file_name(e.seq, e.samples, e.format))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn bytes(&self) -> u64 {
        self.total_bytes
    }

    pub fn samples(&self) -> usize {
        self.entries.values().map(|e| e.samples).sum()
    }

    /// Samples dropped by the size bound since the spool was opened.
    pub fn dropped_samples_total(&self) -> u64 {
        self.dropped_samples_total
    }

    /// The batch to send next.
    pub fn oldest(&self) -> Option<Entry> {
        self.entries.values().next().copied()
    }

    /// All spooled batches, oldest first.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries.values().copied().collect()
    }

    pub fn read(&self, e: &Entry) -> Result<Vec<u8>, SpoolError> {
        let path = self.path_of(e);
        fs::read(&path).map_err(io_err(&path))
    }

    /// Writes a batch durably. When the spool would exceed its bound, the oldest batches are
    /// dropped first: during a long outage the newest data is the most useful.
    pub fn push(&mut self, body: &[u8], samples: usize, format: WireFormat) -> Result<PushOutcome, SpoolError> {
        let need = body.len() as u64;
        let mut out = PushOutcome::default();
        while self.total_bytes + need > self.max_bytes {
            let Some(old) = self.oldest() else { break };
            self.remove(&old)?;
            out.dropped_batches += 1;
            out.dropped_samples += old.samples;
        }
        if out.dropped_batches > 0 {
            self.dropped_samples_total += out.dropped_samples as u64;
            tracing::warn!(
                dropped_batches = out.dropped_batches,
                dropped_samples = out.dropped_samples,
                dropped_samples_total = self.dropped_samples_total,
                max_bytes = self.max_bytes,
                "SPOOL FULL: dropped the oldest unsent samples; they are lost. Is the server reachable?"
            );
        }
        let seq = self.next_seq;
        let tmp = self.dir.join(format!(".{seq:020}{TMP_SUFFIX}"));
        let path = self.dir.join(file_name(seq, samples, format));
        let write = || -> io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(body)?;
            // The data, and the size that makes it readable; the rename is made durable below.
            f.sync_data()
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&tmp)(e));
        }
        fs::rename(&tmp, &path).map_err(io_err(&path))?;
        sync_dir(&self.dir)?;
        self.next_seq += 1;
        self.entries.insert(seq, Entry { seq, samples, bytes: need, format });
        self.total_bytes += need;
        out.seq = seq;
        Ok(out)
    }

    /// The server committed the batch: forget it. A batch already dropped by the bound is fine.
    pub fn ack(&mut self, seq: u64) -> Result<(), SpoolError> {
        match self.entries.get(&seq).copied() {
            Some(e) => self.remove(&e),
            None => Ok(()),
        }
    }

    /// The server will never accept the batch: keep it in `rejected/` next to a `.error.txt`
    /// with the reason, out of the send queue.
    pub fn reject(&mut self, seq: u64, reason: &str) -> Result<Option<PathBuf>, SpoolError> {
        let Some(e) = self.entries.get(&seq).copied() else {
            return Ok(None);
        };
        let rejected = self.rejected_dir();
        let name = file_name(e.seq, e.samples, e.format);
        let dest = rejected.join(&name);
        let note = rejected.join(format!("{seq:020}.error.txt"));
        fs::write(&note, format!("{reason}\n")).map_err(io_err(&note))?;
        fs::rename(self.dir.join(&name), &dest).map_err(io_err(&dest))?;
        sync_dir(&rejected)?;
        sync_dir(&self.dir)?;
        self.entries.remove(&seq);
        self.total_bytes -= e.bytes;
        Ok(Some(dest))
    }

    fn remove(&mut self, e: &Entry) -> Result<(), SpoolError> {
        let path = self.path_of(e);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_err(&path)(err)),
        }
        self.entries.remove(&e.seq);
        self.total_bytes -= e.bytes;
        Ok(())
    }
}

/// The spool shared by the collector and the pusher. File IO (with its fsyncs) runs on
/// tokio's blocking pool so it never stalls the async workers.
#[derive(Debug, Clone)]
pub struct SharedSpool(Arc<Mutex<Spool>>);

impl SharedSpool {
    pub fn new(spool: Spool) -> Self {
        Self(Arc::new(Mutex::new(spool)))
    }

    /// Runs `f` on the spool, on the blocking pool.
    pub async fn with<T, F>(&self, f: F) -> Result<T, SpoolError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Spool) -> Result<T, SpoolError> + Send + 'static,
    {
        let inner = self.0.clone();
        tokio::task::spawn_blocking(move || {
            // A panic elsewhere cannot leave the index inconsistent with the files in a way
            // that matters: the files are the truth and are rescanned on the next start.
            let mut spool = inner.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut spool)
        })
        .await
        .map_err(|e| SpoolError::Task(e.to_string()))?
    }

    /// Quick look without the blocking pool (no IO).
    pub fn peek<T>(&self, f: impl FnOnce(&Spool) -> T) -> T {
        f(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub async fn push(&self, body: Vec<u8>, samples: usize, format: WireFormat) -> Result<PushOutcome, SpoolError> {
        self.with(move |s| s.push(&body, samples, format)).await
    }

    /// The oldest batch and its bytes.
    pub async fn oldest(&self) -> Result<Option<(Entry, Vec<u8>)>, SpoolError> {
        // Nothing to read: answer without a trip through the blocking pool.
        if self.peek(Spool::is_empty) {
            return Ok(None);
        }
        self.with(|s| match s.oldest() {
            Some(e) => s.read(&e).map(|b| Some((e, b))),
            None => Ok(None),
        })
        .await
    }

    pub async fn ack(&self, seq: u64) -> Result<(), SpoolError> {
        self.with(move |s| s.ack(seq)).await
    }

    pub async fn reject(&self, seq: u64, reason: String) -> Result<Option<PathBuf>, SpoolError> {
        self.with(move |s| s.reject(seq, &reason)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn oldest_first_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path(), 1 << 20).unwrap();
        assert!(s.is_empty());
        for i in 0..5u8 {
            // Batches of both formats, as after a switch of --wire-format with batches spooled.
            let format = WireFormat::ALL[usize::from(i) % 2];
            s.push(&[i; 10], usize::from(i) + 1, format).unwrap();
        }
        assert_eq!(s.oldest().unwrap().seq, 1);
        s.ack(1).unwrap();
        assert_eq!(s.oldest().unwrap().seq, 2);
        drop(s);

        let mut s = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(s.entries().iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3, 4, 5]);
        assert_eq!(s.samples(), 2 + 3 + 4 + 5);
        assert_eq!(s.bytes(), 40);
        let formats: Vec<WireFormat> = s.entries().iter().map(|e| e.format).collect();
        assert_eq!(formats, [WireFormat::Json, WireFormat::Protobuf, WireFormat::Json, WireFormat::Protobuf]);
        let e = s.oldest().unwrap();
        assert_eq!(s.read(&e).unwrap(), vec![1u8; 10]);
        // New batches continue the sequence after what was on disk.
        assert_eq!(s.push(b"x", 1, WireFormat::Protobuf).unwrap().seq, 6);
        for seq in 2..=6 {
            assert_eq!(s.oldest().unwrap().seq, seq);
            s.ack(seq).unwrap();
        }
        assert!(s.is_empty());
        assert_eq!(s.bytes(), 0);
        assert_eq!(names(dir.path()), [REJECTED_DIR]);
    }

    #[test]
    fn half_written_files_are_removed_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path(), 1 << 20).unwrap();
        s.push(b"whole", 3, WireFormat::Protobuf).unwrap();
        drop(s);
        // What a crash between create and rename leaves behind.
        fs::write(dir.path().join(format!(".{:020}{TMP_SUFFIX}", 2)), b"hal").unwrap();
        let s = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s.read(&s.oldest().unwrap()).unwrap(), b"whole");
        assert_eq!(names(dir.path()), [format!("{:020}-3.pb.zst", 1), REJECTED_DIR.to_string()]);
    }

    #[test]
    fn rejected_batches_are_kept_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path(), 1 << 20).unwrap();
        s.push(b"good", 1, WireFormat::Protobuf).unwrap();
        s.push(b"bad", 2, WireFormat::Protobuf).unwrap();
        let dest = s.reject(2, "422 invalid_sample: samples[0].uuid missing").unwrap().unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"bad");
        let note = fs::read_to_string(s.rejected_dir().join(format!("{:020}.error.txt", 2))).unwrap();
        assert!(note.contains("422"));
        assert_eq!(s.entries().iter().map(|e| e.seq).collect::<Vec<_>>(), [1]);
        assert_eq!(s.bytes(), 4);
        s.ack(1).unwrap();
        drop(s);
        // A reopened (now empty) spool never reuses the rejected batch's number.
        let mut s = Spool::open(dir.path(), 1 << 20).unwrap();
        assert!(s.is_empty());
        assert_eq!(s.push(b"next", 1, WireFormat::Protobuf).unwrap().seq, 3);
    }

    #[test]
    fn size_bound_drops_the_oldest() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path(), 100).unwrap();
        for _ in 0..4 {
            assert_eq!(s.push(&[0; 25], 10, WireFormat::Protobuf).unwrap().dropped_batches, 0);
        }
        let out = s.push(&[1; 30], 7, WireFormat::Protobuf).unwrap();
        assert_eq!((out.dropped_batches, out.dropped_samples), (2, 20));
        assert_eq!(s.entries().iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(s.bytes(), 80);
        assert_eq!(s.dropped_samples_total(), 20);
        assert!(s.bytes() <= 100);
        // Files on disk match the index.
        assert_eq!(names(dir.path()).len(), 3 + 1);
        // Acking a dropped batch is harmless (the pusher may have been sending it).
        s.ack(1).unwrap();
        assert_eq!(s.len(), 3);
    }

    #[tokio::test]
    async fn shared_spool_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let s = SharedSpool::new(Spool::open(dir.path(), 1 << 20).unwrap());
        s.push(b"a".to_vec(), 1, WireFormat::Protobuf).await.unwrap();
        s.push(b"b".to_vec(), 1, WireFormat::Protobuf).await.unwrap();
        let (e, body) = s.oldest().await.unwrap().unwrap();
        assert_eq!((e.seq, body.as_slice()), (1, &b"a"[..]));
        s.ack(1).await.unwrap();
        let (e, body) = s.oldest().await.unwrap().unwrap();
        assert_eq!((e.seq, body.as_slice()), (2, &b"b"[..]));
        assert_eq!(s.peek(|s| s.len()), 1);
    }
}
