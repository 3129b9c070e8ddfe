//! Secrets from the operating system (memory-key secrets, spec/security.md §1.1).

use std::io::{self, Read};

/// 16 bytes from the kernel's CSPRNG: getrandom(2), or /dev/urandom where the call is
/// missing. An error if neither works: keys must never quietly become guessable.
pub fn os_secret() -> io::Result<[u8; 16]> {
    let mut s = [0u8; 16];
    let mut got = 0;
    while got < s.len() {
        // SAFETY: writes at most `s.len() - got` bytes into the live buffer `s` from `got`.
        let n = unsafe {
            libc::getrandom(s[got..].as_mut_ptr() as *mut libc::c_void, s.len() - got, 0)
        };
        if n > 0 {
            got += n as usize;
            continue;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ENOSYS) => {
                std::fs::File::open("/dev/urandom")?.read_exact(&mut s)?;
                return Ok(s);
            }
            _ => return Err(e),
        }
    }
    Ok(s)
}

/// A memory-key generator seeded from the OS.
pub fn os_keys() -> io::Result<ferroce_transport::keys::KeyGen> {
    os_secret().map(ferroce_transport::keys::KeyGen::new)
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_secrets_differ() {
        let (a, b) = (super::os_secret().unwrap(), super::os_secret().unwrap());
        assert_ne!(a, b);
        assert_ne!(a, [0; 16]);
    }
}
