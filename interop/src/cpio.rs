//! A minimal writer of the `newc` cpio format the Linux initramfs loader reads (uncompressed:
//! under software emulation the kernel unpacks it faster than it would inflate it).

use std::io::{self, Write};

/// Builds an archive in memory. Entries are written in the order added; directories must be
/// added before what they hold.
#[derive(Default)]
pub struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    pub fn new() -> Self {
        Cpio::default()
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let name = name.trim_start_matches('/');
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            1, // nlink
            0, // mtime
            data.len() as u32,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0, // check
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    pub fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[]);
    }

    pub fn file(&mut self, name: &str, data: &[u8], executable: bool) {
        let mode = if executable { 0o100755 } else { 0o100644 };
        self.entry(name, mode, data);
    }

    pub fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120777, target.as_bytes());
    }

    /// The archive with its trailer.
    pub fn finish(mut self, out: &mut impl Write) -> io::Result<()> {
        self.entry("TRAILER!!!", 0, &[]);
        out.write_all(&self.buf)
    }
}
