//! [`TraceWriter`]: records events from any number of threads into a trace file, encoding and
//! writing on one background thread.
//!
//! Why a thread and a bounded channel: hooks run on the application's threads, inside CUDA
//! calls; they must not do file I/O or hold a lock while encoding. A bounded channel caps the
//! memory the trace can take (a few MB), and when the disk cannot keep up the recording thread
//! waits for room instead of dropping events: a trace with holes would mislead every later
//! analysis, a slow trace does not.
//!
//! Accounting (what [`TraceSummary`] reports): every recorded event ends up in exactly one of
//! `events_written` (its bytes reached the OS in a successful `write`) or `events_lost` (it was
//! buffered when a write failed, arrived after a write failed or after `close`, or the writer
//! thread was gone): at `finish`, `recorded = events_written + events_lost`. The thread keeps its own buffer instead of a
//! `BufWriter` so that this is exact: it knows which events each `write_all` carried.
//!
//! After the first write error the file is left as it is (possibly ending inside a record,
//! which a reader reports as truncation at that record) and the thread only counts: one
//! `itermem:` line on stderr says so. Nothing here panics or blocks the program forever: the
//! thread always keeps draining the channel.
//!
//! While events keep coming the thread polls the channel (every [`POLL`]) instead of sleeping
//! in it: a receiver asleep in the channel is woken by the producer's `send`, a `futex` system
//! call on the program's thread at every batch (about 20 ns an event in `hook_bench`'s
//! malloc+free pairs, `docs/BENCHMARKS.md`). After [`KEEP_POLLING`] without work it sleeps in
//! the channel again, so an idle program has no thread waking up.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use super::format;
use super::{EndRecord, TraceHeader};
use crate::event::Event;

/// What a finished writer did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// Events whose records reached the file.
    pub events_written: u64,
    /// Events recorded but not in the file (after a write error).
    pub events_lost: u64,
    /// Bytes in the file (header and end record included).
    pub bytes_written: u64,
    /// The first write error, as reported on stderr (`None` when all went well).
    pub error: Option<String>,
}

enum Msg {
    Event(Event),
    /// Events in recording order, handed over together: a producer that records millions of
    /// events pays for one channel hand-over per batch instead of per event. Then the work
    /// that came with them, if any; the work to do on them before they are encoded first.
    Batch(Vec<Event>, Option<BeforeBatch>, Option<AfterBatch>),
    /// Write everything before this message, then answer.
    Flush(Sender<()>),
    /// Write everything and the end record, answer with the summary, and from then on count
    /// every event as lost (the thread stays, so that no late event goes uncounted).
    Close(Sender<TraceSummary>),
    /// Close if not closed, then exit.
    Finish,
}

/// Work a producer hands over with a batch, run on the writer thread once the batch is
/// encoded: work that must follow the events in order but that the program need not wait for
/// (itermem's iteration detector in record mode).
pub type AfterBatch = Box<dyn FnOnce() + Send>;

/// Work a producer hands over with a batch, run on the writer thread on the batch's events
/// before they are encoded: what the events need filled in that the program need not wait
/// for (the blocks a launch touches, in record mode: `interposer::late`).
pub type BeforeBatch = Box<dyn FnOnce(&mut [Event]) + Send>;

/// Records [`Event`]s into a trace file from any thread (`&self`, `Send + Sync`).
///
/// Ending a recording: [`finish`](TraceWriter::finish) when the writer can be moved, or
/// [`close`](TraceWriter::close) when it lives in a `static` (whose destructor never runs), e.g.
/// from an `atexit` handler. Dropping a writer finishes it too, without telling the summary.
pub struct TraceWriter {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<TraceSummary>>,
    path: PathBuf,
    /// Events that could not even be handed over (the writer thread is gone). Relaxed: a counter
    /// read only after the thread has been joined.
    unsent: AtomicU64,
    /// Batches the thread has written, emptied, for producers to fill again: a batch allocated
    /// on one thread and freed on another costs the C allocator more than the events in it.
    spares: Receiver<Vec<Event>>,
}

/// Creates (truncates) the trace file, unless another live writer holds it. A FIFO or a
/// socket is refused: opening a FIFO for writing blocks until a reader comes, which would hang
/// the program at its first CUDA call. The file is locked (`flock`, released when the process
/// ends) before it is truncated, so a second process given the same path (one per GPU, all
/// with the same environment) is refused instead of mixing its events into the first's file.
fn create_regular(path: &Path) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::metadata(path) {
        let kind = meta.file_type();
        if kind.is_fifo() || kind.is_socket() || kind.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file (a FIFO, a socket or a directory); traces are written to \
                 files",
            ));
        }
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    // SAFETY: a valid open descriptor; flock only changes the lock on its open file.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "another running process is writing this trace (put %p in ITERMEM_TRACE to give \
             each process its own file)",
        ));
    }
    file.set_len(0)?;
    Ok(file)
}

/// Blocks SIGXFSZ in the calling (writer) thread, so that exceeding the file size limit is an
/// `EFBIG` write error, reported and counted, not the end of the program.
fn block_file_size_signal() {
    // SAFETY: a zeroed sigset_t is initialised by sigemptyset before use; pthread_sigmask
    // changes only the calling thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGXFSZ);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

impl TraceWriter {
    /// Channel capacity of [`create`](TraceWriter::create), in events (about 1–2 MB of events).
    pub const DEFAULT_CAPACITY: usize = 16 * 1024;

    /// Creates (truncates) `path`, writes the header, and starts the writer thread.
    pub fn create(path: &Path, header: TraceHeader) -> io::Result<TraceWriter> {
        TraceWriter::with_capacity(path, header, TraceWriter::DEFAULT_CAPACITY)
    }

    /// Like [`create`](TraceWriter::create) with a channel of `capacity` events (at least 1):
    /// when that many are waiting, [`record`](TraceWriter::record) blocks.
    pub fn with_capacity(
        path: &Path,
        header: TraceHeader,
        capacity: usize,
    ) -> io::Result<TraceWriter> {
        let header_bytes = format::encode_header(&header)?;
        let file = create_regular(path)?;
        TraceWriter::start(path, file, header_bytes, capacity)
    }

    /// Starts the writer thread on `file`, which writes `header` first. Only that thread
    /// writes the file: a write beyond the process's file size limit (`ulimit -f`) then fails
    /// with `EFBIG` there, where SIGXFSZ is blocked, instead of killing the program.
    fn start(path: &Path, file: File, header: Vec<u8>, capacity: usize) -> io::Result<Self> {
        let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
        let (spare_tx, spares) = crossbeam_channel::bounded(capacity.max(1));
        let mut buf = Vec::with_capacity(BUF_TARGET + 4096);
        buf.extend_from_slice(&header);
        let sink = Sink {
            path: path.to_path_buf(),
            file,
            buf,
            body: Vec::with_capacity(256),
            prev_time: 0,
            buffered: 0,
            closed: false,
            after_batch_failed: false,
            summary: TraceSummary::default(),
            spares: spare_tx,
        };
        let thread = std::thread::Builder::new()
            .name("itermem-trace".into())
            .spawn(move || {
                block_file_size_signal();
                sink.run(rx)
            })?;
        Ok(TraceWriter {
            tx,
            thread: Some(thread),
            path: path.to_path_buf(),
            unsent: AtomicU64::new(0),
            spares,
        })
    }

    /// The trace file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hands `event` to the writer thread; blocks while the channel is full.
    pub fn record(&self, event: Event) {
        if self.tx.send(Msg::Event(event)).is_err() {
            // Only possible if the writer thread died, which it does not do while `self` lives.
            self.unsent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hands a batch of events, in order, to the writer thread; blocks while the channel is full
    /// (the channel's capacity counts messages, so a batch takes one place).
    pub fn record_batch(&self, events: Vec<Event>) {
        self.record_batch_with(events, None, None);
    }

    /// [`record_batch`](TraceWriter::record_batch), with `before` run on the writer thread on
    /// the events before they are encoded and `then` after, in order with every other batch
    /// and its work. A panic of either is reported once and later work is dropped (events
    /// are then written as they were handed over); the trace goes on.
    pub fn record_batch_with(
        &self,
        events: Vec<Event>,
        before: Option<BeforeBatch>,
        then: Option<AfterBatch>,
    ) {
        let count = events.len() as u64;
        if self.tx.send(Msg::Batch(events, before, then)).is_err() {
            self.unsent.fetch_add(count, Ordering::Relaxed);
        }
    }

    /// An empty batch the thread has written before, if one is waiting, to fill again.
    pub fn spare_batch(&self) -> Option<Vec<Event>> {
        self.spares.try_recv().ok()
    }

    /// Counts `events` as lost that a stage in front of the writer could not hand over.
    pub fn count_unsent(&self, events: usize) {
        self.unsent.fetch_add(events as u64, Ordering::Relaxed);
    }

    /// Returns once every event recorded before the call (by any thread, in the happens-before
    /// sense) has been written to the file, i.e. handed to the OS, or counted as lost. Safe from
    /// any thread, e.g. one that watches for SIGTERM; not from a signal handler (it allocates
    /// and waits).
    pub fn flush(&self) {
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        if self.tx.send(Msg::Flush(ack_tx)).is_ok() {
            // An error means the thread is gone: nothing more will be written anyway.
            let _ = ack_rx.recv();
        }
    }

    /// [`flush`](TraceWriter::flush), giving up after `timeout` (for a process that must exit).
    /// Returns whether the flush completed.
    pub fn flush_timeout(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        self.tx.send_deadline(Msg::Flush(ack_tx), deadline).is_ok()
            && ack_rx.recv_deadline(deadline).is_ok()
    }

    /// Writes everything recorded before the call and the end record, and returns the summary;
    /// events recorded afterwards are not written but counted as lost (in the summary of a later
    /// `close` or `finish`). For a writer that cannot be moved into
    /// [`finish`](TraceWriter::finish); calling it again is harmless. `None` if the writer
    /// thread is gone (it panicked).
    pub fn close(&self) -> Option<TraceSummary> {
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        self.tx.send(Msg::Close(ack_tx)).ok()?;
        let mut summary = ack_rx.recv().ok()?;
        summary.events_lost += self.unsent.load(Ordering::Relaxed);
        Some(summary)
    }

    /// Writes everything recorded, appends the end record (unless [`close`](TraceWriter::close)
    /// did), and stops the thread.
    /// Write errors do not make this fail: they are in the summary (and were reported on
    /// stderr). `Err` only if the writer thread itself failed.
    pub fn finish(mut self) -> io::Result<TraceSummary> {
        self.stop()
            .ok_or_else(|| io::Error::other("itermem trace writer thread panicked"))
    }

    fn stop(&mut self) -> Option<TraceSummary> {
        let thread = self.thread.take()?;
        let _ = self.tx.send(Msg::Finish);
        let mut summary = thread.join().ok()?;
        summary.events_lost += self.unsent.load(Ordering::Relaxed);
        Some(summary)
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Write to the file once this many bytes are buffered.
const BUF_TARGET: usize = 64 * 1024;
/// Write a partly filled buffer after the channel has been idle this long, so that a crash
/// loses little and a reader of a running trace sees recent events.
const IDLE_WRITE: Duration = Duration::from_millis(50);
/// How long the thread sleeps between two looks at an empty channel while events keep coming.
/// The channel holds [`TraceWriter::with_capacity`]'s messages meanwhile (the recorder's 64
/// batches of 256 events: a producer would need over 16 million events a second to fill it).
const POLL: Duration = Duration::from_millis(1);
/// How long after its last message the thread keeps polling before it sleeps in the channel.
const KEEP_POLLING: Duration = Duration::from_millis(100);

/// The writer thread's state.
struct Sink {
    path: PathBuf,
    file: File,
    /// Encoded records not yet written.
    buf: Vec<u8>,
    /// Scratch space for one record body.
    body: Vec<u8>,
    /// Time of the last encoded record (records carry time deltas).
    prev_time: u64,
    /// Events in `buf`.
    buffered: u64,
    /// The end record has been written: further events are lost.
    closed: bool,
    /// Work handed over with a batch panicked: later work is dropped.
    after_batch_failed: bool,
    summary: TraceSummary,
    /// Where written batches go back to producers (see `TraceWriter::spares`).
    spares: Sender<Vec<Event>>,
}

impl Sink {
    fn run(mut self, rx: Receiver<Msg>) -> TraceSummary {
        // When the oldest bytes of the buffer arrived: under a steady stream of events they are
        // written after IDLE_WRITE too, so a process that dies loses only its last moments.
        let mut oldest: Option<std::time::Instant> = None;
        let mut last_message = std::time::Instant::now();
        loop {
            if self.buf.is_empty() {
                oldest = None;
            } else if oldest.get_or_insert_with(std::time::Instant::now).elapsed() >= IDLE_WRITE {
                self.write_out();
                oldest = None;
            }
            let msg = match rx.try_recv() {
                Ok(msg) => Some(msg),
                Err(TryRecvError::Disconnected) => None,
                Err(TryRecvError::Empty) if last_message.elapsed() < KEEP_POLLING => {
                    std::thread::sleep(POLL);
                    continue;
                }
                Err(TryRecvError::Empty) if self.buf.is_empty() => rx.recv().ok(),
                Err(TryRecvError::Empty) => match rx.recv_timeout(IDLE_WRITE) {
                    Ok(msg) => Some(msg),
                    Err(RecvTimeoutError::Timeout) => {
                        self.write_out();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => None,
                },
            };
            last_message = std::time::Instant::now();
            match msg {
                Some(Msg::Event(event)) => self.push(&event),
                Some(Msg::Batch(mut events, before, then)) => {
                    if let Some(before) = before {
                        self.run_guarded(|| before(&mut events));
                    }
                    events.iter().for_each(|event| self.push(event));
                    events.clear();
                    // Dropped when producers already have enough spares.
                    let _ = self.spares.try_send(events);
                    if let Some(then) = then {
                        self.run_guarded(then);
                    }
                }
                Some(Msg::Flush(ack)) => {
                    self.write_out();
                    let _ = ack.send(());
                }
                Some(Msg::Close(ack)) => {
                    self.close();
                    let _ = ack.send(self.summary.clone());
                }
                // Disconnected cannot happen before `Finish` (the writer sends it on drop), but
                // it means the same.
                Some(Msg::Finish) | None => break,
            }
            if self.buf.len() >= BUF_TARGET {
                self.write_out();
            }
        }
        self.close();
        self.summary
    }

    /// Runs work handed over with a batch, unless earlier work panicked (then it is dropped:
    /// what it follows has lost events).
    fn run_guarded(&mut self, work: impl FnOnce()) {
        if self.after_batch_failed {
            return;
        }
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).is_err() {
            self.after_batch_failed = true;
            let _ = writeln!(
                io::stderr(),
                "itermem: internal error in the work on the trace's events (the iteration \
                 detector, the blocks of launches); the trace goes on (launches resolved on its \
                 thread from then on without their blocks), the statistics' iteration stops \
                 there"
            );
        }
    }

    /// Writes the end record and everything before it, once; afterwards `push` only counts.
    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.summary.error.is_none() {
            let end = EndRecord {
                events_written: self.summary.events_written + self.buffered,
                events_lost: self.summary.events_lost,
            };
            format::encode_end(&end, &mut self.body, &mut self.buf);
        }
        self.write_out();
    }

    fn push(&mut self, event: &Event) {
        if self.closed || self.summary.error.is_some() {
            self.summary.events_lost += 1;
            return;
        }
        format::encode_event(event, &mut self.prev_time, &mut self.body, &mut self.buf);
        self.buffered += 1;
    }

    /// Writes the buffer; on failure reports once and switches to counting.
    fn write_out(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        match self.file.write_all(&self.buf) {
            Ok(()) => {
                self.summary.events_written += self.buffered;
                self.summary.bytes_written += self.buf.len() as u64;
            }
            Err(err) => {
                self.summary.events_lost += self.buffered;
                let message = format!(
                    "cannot write trace file {}: {err}; recording goes on without it, lost \
                     events are counted",
                    self.path.display()
                );
                // Not `eprintln!`, which panics when stderr is unwritable.
                let _ = writeln!(io::stderr(), "itermem: {message}");
                self.summary.error = Some(message);
            }
        }
        self.buffered = 0;
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    /// `/dev/full` fails every write with ENOSPC (no header here: the events' loss is counted).
    #[test]
    fn a_full_disk_is_reported_once_and_every_event_is_counted_as_lost() {
        let path = Path::new("/dev/full");
        let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) else {
            return; // no /dev/full on this system
        };
        let writer = TraceWriter::start(path, file, Vec::new(), 8).unwrap();
        for i in 0..1_000 {
            writer.record(Event::new(i, EventKind::Free { id: i, stream: 0 }));
            if i == 500 {
                writer.flush(); // returns although the write failed
            }
        }
        let summary = writer.finish().unwrap();
        assert_eq!(summary.events_written, 0);
        assert_eq!(summary.events_lost, 1_000);
        let error = summary.error.unwrap();
        assert!(error.contains("/dev/full"), "{error}");
        assert!(error.contains("No space left"), "{error}");
    }

    #[test]
    fn a_fifo_is_refused_instead_of_blocking() {
        let fifo = crate::test_support::TempPath::new("trace.fifo");
        let name = std::ffi::CString::new(fifo.0.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let err = create_regular(&fifo.0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("FIFO"), "{err}");
    }

    #[test]
    fn a_file_another_writer_holds_is_refused_and_kept() {
        let path = crate::test_support::TempPath::new("shared.itrace");
        let mut first = create_regular(&path.0).unwrap();
        first.write_all(b"first").unwrap();
        let err = create_regular(&path.0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(err.to_string().contains("%p"), "{err}");
        assert_eq!(std::fs::read(&path.0).unwrap(), b"first", "not truncated");
        drop(first);
        create_regular(&path.0).unwrap(); // released with its writer
    }

    #[test]
    fn work_after_a_batch_runs_in_order_and_a_panic_stops_only_the_work() {
        let path = crate::test_support::TempPath::new("after-batch.itrace");
        let writer =
            TraceWriter::create(&path.0, TraceHeader::for_this_process("test".into(), 0)).unwrap();
        let order = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let free = |id| vec![Event::new(id, EventKind::Free { id, stream: 0 })];
        for (id, panics) in [(1, false), (2, true), (3, false)] {
            let order = std::sync::Arc::clone(&order);
            writer.record_batch_with(
                free(id),
                None,
                Some(Box::new(move || {
                    order.lock().push(id);
                    assert!(!panics, "injected");
                })),
            );
        }
        writer.flush();
        assert_eq!(*order.lock(), [1, 2], "the work after the panic is dropped");
        let summary = writer.finish().unwrap();
        assert_eq!((summary.events_written, summary.events_lost), (3, 0));
    }
}
