//! The kernel pipeline on a Cortex-M4: the readings compiled into flash go
//! through `temp > 20.0` and 1 s tumbling windows per sensor; every result
//! row, then the pipeline's counts, goes to the host as a postcard frame
//! (a `frame HEX` line on semihosting stdout). Exits 0 through semihosting
//! when done, 1 on a panic or a fault.
#![no_std]
#![no_main]

use core::fmt::Write as _;
use core::panic::PanicInfo;

use cortex_m_rt::{ExceptionFrame, entry, exception};
use cortex_m_semihosting::{debug, hio};
use eddy::kernel::fixed::{Fired, Frame, WindowRow};
use eddy_firmware_tests::input::READINGS;
use eddy_firmware_tests::pipeline::{self, AGG_COUNT, FRAME_CAPACITY, Pipeline};

type Out = Frame<AGG_COUNT>;

/// Writes frames as hex lines: `frame ` + 2 digits a byte + newline.
struct Link {
    stdout: hio::HostStream,
    buf: [u8; FRAME_CAPACITY],
    line: [u8; 6 + 2 * FRAME_CAPACITY + 1],
    /// The first frame that could not be sent; the run fails if any.
    error: Option<postcard::Error>,
}

impl Link {
    fn send(&mut self, frame: &Out) {
        let bytes = match frame.encode(&mut self.buf) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.error.get_or_insert(e);
                return;
            }
        };
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let n = bytes.len();
        self.line[..6].copy_from_slice(b"frame ");
        for (i, b) in bytes.iter().enumerate() {
            self.line[6 + 2 * i] = HEX[(b >> 4) as usize];
            self.line[7 + 2 * i] = HEX[(b & 15) as usize];
        }
        self.line[6 + 2 * n] = b'\n';
        if self.stdout.write_all(&self.line[..7 + 2 * n]).is_err() {
            fail("semihosting write failed");
        }
    }

    fn row(&mut self, fired: Fired<'_>) {
        match WindowRow::from_fired(&fired) {
            Ok(row) => self.send(&Frame::Row(row)),
            Err(_) => fail("a row has more aggregates than a frame holds"),
        }
    }
}

#[entry]
fn main() -> ! {
    let pipe = pipeline_in_bss();
    // Building the pipeline took stack for temporaries; measure it, then
    // paint again to see what running it takes.
    let init_peak = stack_peak_bytes();
    repaint_stack();
    let Ok(stdout) = hio::hstdout() else {
        fail("no semihosting stdout")
    };
    let mut link = Link {
        stdout,
        buf: [0; FRAME_CAPACITY],
        line: [0; 6 + 2 * FRAME_CAPACITY + 1],
        error: None,
    };
    for reading in READINGS.iter() {
        // A refused reading (a window out of room) is counted in the end
        // frame, and the host fails the run for it; the device goes on.
        let _ = pipe.handle_record(reading, &mut |f| link.row(f));
    }
    pipe.handle_end(&mut |f| link.row(f));
    link.send(&Frame::End(pipe.counts()));
    if let Some(e) = link.error {
        let mut err = hio::hstderr().ok();
        if let Some(err) = err.as_mut() {
            let _ = writeln!(err, "firmware: a frame could not be encoded: {e}");
        }
        debug::exit(debug::EXIT_FAILURE);
    }
    let _ = writeln!(
        link.stdout,
        "stack-peak init {init_peak} run {}",
        stack_peak_bytes()
    );
    debug::exit(debug::EXIT_SUCCESS);
    loop {
        cortex_m::asm::wfi();
    }
}

/// Builds the pipeline in a static, so that the linker counts its RAM (and
/// refuses a pipeline that does not fit). Not inlined: building it takes
/// stack for its temporaries, which `main` should not keep.
#[inline(never)]
fn pipeline_in_bss() -> &'static mut Pipeline {
    let pipe = cortex_m::singleton!(
        PIPELINE: Pipeline = pipeline::new()
            .unwrap_or_else(|_| fail("the pipeline's configuration is refused"))
    );
    pipe.unwrap_or_else(|| fail("the pipeline is built once"))
}

unsafe extern "C" {
    /// The top of the stack (it grows down), from cortex-m-rt's `link.x`.
    static _stack_start: u32;
    /// The lowest address the stack may reach: the end of the statics.
    static _stack_end: u32;
}

/// Paints the unused stack again (below the current stack pointer, less a
/// margin for this function's own frame), as cortex-m-rt did at reset.
#[inline(never)]
fn repaint_stack() {
    let bottom = &raw const _stack_end as usize;
    let sp = cortex_m::register::msp::read() as usize - 64;
    let mut at = bottom;
    while at < sp {
        // SAFETY: words below the stack pointer are unused stack RAM, and
        // no interrupt is enabled that could push a frame there.
        unsafe { core::ptr::write_volatile(at as *mut u32, cortex_m_rt::STACK_PAINT_VALUE) };
        at += 4;
    }
}

/// The deepest the stack has been since it was last painted, in bytes:
/// cortex-m-rt painted it with `STACK_PAINT_VALUE` at reset, so the lowest
/// word no longer painted marks the peak. Reaching `_stack_end` means the
/// stack may have overflowed into the statics.
fn stack_peak_bytes() -> usize {
    let top = &raw const _stack_start as usize;
    let bottom = &raw const _stack_end as usize;
    let mut at = bottom;
    while at < top {
        // SAFETY: every word between the two linker symbols is stack RAM.
        let word = unsafe { core::ptr::read_volatile(at as *const u32) };
        if word != cortex_m_rt::STACK_PAINT_VALUE {
            break;
        }
        at += 4;
    }
    if at == bottom {
        fail("the stack reached the end of RAM");
    }
    top - at
}

/// Reports `why` on semihosting stderr and exits qemu with status 1.
fn fail(why: &str) -> ! {
    if let Ok(mut err) = hio::hstderr() {
        let _ = writeln!(err, "firmware: {why}");
    }
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    if let Ok(mut err) = hio::hstderr() {
        let _ = writeln!(err, "firmware panicked: {info}");
    }
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    if let Ok(mut err) = hio::hstderr() {
        let _ = writeln!(err, "firmware: hard fault at pc {:#010x}", frame.pc());
    }
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}
