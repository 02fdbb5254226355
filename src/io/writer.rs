//! The writer thread of a `stdout` or `file` sink.
//!
//! Every worker's instance of the sink encodes its batches itself and sends
//! the bytes here, so encoding runs in parallel and only the write is
//! serial. The channel is bounded: a slow disk or a slow reader of stdout
//! slows the workers down instead of filling memory.

use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::thread::JoinHandle;

/// The sending side, cloned into every worker's sink instance.
pub(crate) type SinkWriter = flume::Sender<Vec<u8>>;

pub(crate) enum Target {
    Stdout,
    File(PathBuf),
}

/// Opens the target and starts its writer thread. `header` is written
/// first, unless the file already has content (appending to it).
pub(crate) fn spawn_writer(
    component: &str,
    target: Target,
    header: Vec<u8>,
    capacity: usize,
    fail: std::sync::Arc<dyn Fn(String) + Send + Sync>,
    stop: std::sync::Arc<dyn Fn() + Send + Sync>,
) -> std::io::Result<(SinkWriter, JoinHandle<()>)> {
    let (mut out, name): (Box<dyn Write + Send>, String) = match &target {
        Target::Stdout => (Box::new(std::io::stdout()), "stdout".into()),
        Target::File(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            let f = OpenOptions::new().create(true).append(true).open(path)?;
            let empty = f.metadata()?.len() == 0;
            let mut w: Box<dyn Write + Send> = Box::new(f);
            if empty {
                w.write_all(&header)?;
            }
            (w, path.display().to_string())
        }
    };
    if matches!(target, Target::Stdout) {
        out.write_all(&header)?;
    }
    let (tx, rx) = flume::bounded::<Vec<u8>>(capacity);
    let component = component.to_string();
    let handle = std::thread::Builder::new()
        .name(format!("eddy-write-{component}"))
        .spawn(move || {
            let mut out = BufWriter::with_capacity(256 * 1024, out);
            let result = (|| -> std::io::Result<()> {
                while let Ok(bytes) = rx.recv() {
                    out.write_all(&bytes)?;
                    // Flush whenever nothing else is waiting, so output shows up
                    // promptly at low rates and in large writes at high ones.
                    if rx.is_empty() {
                        out.flush()?;
                    }
                }
                out.flush()
            })();
            match result {
                Ok(()) => {}
                // A reader that went away (`eddy run ... | head`) ends the
                // run the way it ends a Unix pipeline: quietly.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    tracing::info!(
                        "sinks.{component}: {name} was closed by its reader; stopping the sources"
                    );
                    stop();
                }
                Err(e) => fail(format!("sinks.{component}: cannot write to {name}: {e}")),
            }
        })?;
    Ok((tx, handle))
}
