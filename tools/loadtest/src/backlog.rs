//! Bytes the gateway has not read yet: the receive queues of its sockets in the kernel's socket
//! table (`/proc/{pid}/net/tcp` and `tcp6`). The gateway's own latency starts when it reads the
//! frame that ends an utterance, so the time that frame waited in its socket is measured here.
//! Reading the tables blocks for milliseconds (the kernel walks its connection hash), so it is
//! done off the runtime's workers and less often than the other samples.

use serde::Serialize;

use super::session::FRAME_BYTES;

/// A client's 20 ms frame on the wire: 2 header bytes, 2 of length, 4 of mask, then the PCM.
pub const WIRE_FRAME_BYTES: f64 = (FRAME_BYTES + 8) as f64;

/// What the gateway's sockets held unread at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Unread {
    /// Unread bytes in all of them.
    pub bytes: u64,
    /// Established sockets on the gateway's port.
    pub sockets: usize,
    /// Those holding unread bytes.
    pub with_unread: usize,
    /// The most unread bytes in one socket.
    pub largest: u64,
}

/// The gateway's unread bytes while the most sessions were connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SocketBacklog {
    /// The most established sockets seen on the gateway's port.
    pub sockets: usize,
    /// Unread bytes in all the gateway's sockets, on average over the samples.
    pub mean_unread_bytes: f64,
    /// Share of the gateway's sockets holding unread bytes, on average (0 to 1).
    pub share_with_unread: f64,
    /// The most unread bytes seen in one socket.
    pub largest_unread_bytes: u64,
    /// How long a frame waited in its socket to be read, on average (Little's law: the frames
    /// waiting over the rate frames were sent); absent when no audio was sent.
    pub mean_wait_ms: Option<f64>,
}

/// Adds the established sockets on local port `port` of a `/proc/net/tcp`-format table.
pub fn add_table(table: &str, port: u16, into: &mut Unread) {
    // "sl local_address rem_address st tx_queue:rx_queue …", addresses and numbers in hex.
    for line in table.lines().skip(1) {
        let mut fields = line.split_whitespace().skip(1);
        let (Some(local), Some(_remote), Some(state), Some(queues)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let local_port = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        // 01: ESTABLISHED.
        if local_port != Some(port) || state != "01" {
            continue;
        }
        let Some(unread) = queues
            .split_once(':')
            .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok())
        else {
            continue;
        };
        into.sockets += 1;
        into.bytes += unread;
        if unread > 0 {
            into.with_unread += 1;
        }
        into.largest = into.largest.max(unread);
    }
}

/// The unread bytes of the sockets on `port` in process `pid`'s network namespace; `None` when
/// its socket tables cannot be read.
pub fn sample(pid: u32, port: u16) -> Option<Unread> {
    let mut unread = Unread::default();
    let mut read_any = false;
    for table in ["tcp", "tcp6"] {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) {
            add_table(&text, port, &mut unread);
            read_any = true;
        }
    }
    read_any.then_some(unread)
}

/// The backlog over the samples taken while `peak` sessions (the most) were connected, given
/// how many frames per second the generator sent then.
pub fn at_peak(
    samples: &[(usize, Unread)],
    peak: usize,
    frames_per_second: f64,
) -> Option<SocketBacklog> {
    if peak == 0 {
        return None;
    }
    let at_peak: Vec<&Unread> = samples
        .iter()
        .filter(|(sessions, _)| *sessions == peak)
        .map(|(_, unread)| unread)
        .collect();
    if at_peak.is_empty() {
        return None;
    }
    let n = at_peak.len() as f64;
    let mean_unread_bytes = at_peak.iter().map(|u| u.bytes as f64).sum::<f64>() / n;
    let share_with_unread = at_peak
        .iter()
        .map(|u| u.with_unread as f64 / u.sockets.max(1) as f64)
        .sum::<f64>()
        / n;
    let mean_wait_ms = (frames_per_second > 0.0)
        .then(|| mean_unread_bytes / WIRE_FRAME_BYTES / frames_per_second * 1000.0);
    Some(SocketBacklog {
        sockets: at_peak.iter().map(|u| u.sockets).max().unwrap_or(0),
        mean_unread_bytes,
        share_with_unread,
        largest_unread_bytes: at_peak.iter().map(|u| u.largest).max().unwrap_or(0),
        mean_wait_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:46A1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:46A1 0100007F:B5D8 01 00000000:00000288 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
   2: 0100007F:46A1 0100007F:B5DA 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
   3: 0100007F:B5D8 0100007F:46A1 01 00000000:00001000 00:00000000 00000000     0        0 4 1 0 20 4 30 10 -1
   4: 0100007F:46A1 0100007F:B5DC 06 00000000:00000500 00:00000000 00000000     0        0 0 3 0
";

    #[test]
    fn counts_the_established_sockets_on_the_gateways_port_only() {
        let mut unread = Unread::default();
        add_table(TABLE, 0x46A1, &mut unread);
        // Not the listener (0A), not the client's end (local port B5D8), not TIME_WAIT (06).
        assert_eq!(
            unread,
            Unread {
                bytes: 648,
                sockets: 2,
                with_unread: 1,
                largest: 648
            }
        );
    }

    #[test]
    fn reads_ipv6_tables_too() {
        let table = "  sl  local_address                         remote_address                        st tx_queue rx_queue
   0: 00000000000000000000000001000000:46A1 00000000000000000000000001000000:B5D8 01 00000000:00000010 00:00000000 00000000
";
        let mut unread = Unread::default();
        add_table(table, 0x46A1, &mut unread);
        assert_eq!((unread.bytes, unread.sockets), (16, 1));
    }

    #[test]
    fn the_wait_is_the_frames_waiting_over_the_frames_arriving() {
        let unread = |bytes: u64, with_unread: usize| Unread {
            bytes,
            sockets: 100,
            with_unread,
            largest: bytes / 2,
        };
        let samples = [
            (50, unread(1_000_000, 90)),
            (100, unread(648 * 100, 10)),
            (100, unread(648 * 300, 30)),
            (60, unread(1_000_000, 90)),
        ];
        let backlog = at_peak(&samples, 100, 5_000.0).unwrap();
        // 200 frames waiting on average, 5,000 arriving per second: 40 ms each.
        assert_eq!(backlog.mean_unread_bytes, 648.0 * 200.0);
        assert!((backlog.mean_wait_ms.unwrap() - 40.0).abs() < 1e-9);
        assert!((backlog.share_with_unread - 0.2).abs() < 1e-9);
        assert_eq!(backlog.largest_unread_bytes, 648 * 150);
        assert_eq!(backlog.sockets, 100);
        assert_eq!(at_peak(&samples, 100, 0.0).unwrap().mean_wait_ms, None);
        assert_eq!(at_peak(&samples, 0, 5_000.0), None);
    }
}
