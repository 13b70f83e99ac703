//! A process's `/proc/PID/stat`, read and parsed in one place: `PID (COMM) STATE PPID PGRP …`.
//! COMM may hold spaces and parentheses, so the fields are counted from its last `)`. And the
//! pids /proc lists.

/// The fields of `/proc/PID/stat` podvisor reads (proc(5) numbers them from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 2, without its parentheses.
    pub comm: String,
    /// Field 3: `R`, `S`, `D`, `Z`…
    pub state: char,
    /// Field 4.
    pub ppid: i32,
    /// Field 5: the process group.
    pub pgrp: i32,
    /// Field 9: the kernel's flags of its (main) thread.
    pub flags: u32,
    /// Fields 14 to 17: user and system time, its own and that of the children it reaped,
    /// in clock ticks.
    pub cpu_ticks: u64,
    /// Field 22: when it started, in clock ticks since boot.
    pub start_ticks: u64,
    /// Field 24: resident pages.
    pub rss_pages: u64,
}

impl ProcStat {
    /// `pid`'s, or `None` when it is gone (or the text is not what Linux writes).
    pub fn read(pid: i32) -> Option<ProcStat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        ProcStat::parse(&text)
    }

    pub fn parse(text: &str) -> Option<ProcStat> {
        let open = text.find('(')?;
        let close = text.rfind(')')?;
        let comm = text.get(open + 1..close)?.to_string();
        // f[0] is field 3.
        let f: Vec<&str> = text.get(close + 1..)?.split_ascii_whitespace().collect();
        let field = |n: usize| f.get(n - 3).copied();
        let num = |n: usize| field(n)?.parse::<i64>().ok();
        let mut state = field(3)?.chars();
        let cpu = (14..=17).map(num).sum::<Option<i64>>()?;
        Some(ProcStat {
            comm,
            state: state.next().filter(|_| state.next().is_none())?,
            ppid: num(4)?.try_into().ok()?,
            pgrp: num(5)?.try_into().ok()?,
            flags: field(9)?.parse().ok()?,
            cpu_ticks: cpu.max(0) as u64,
            start_ticks: field(22)?.parse().ok()?,
            rss_pages: num(24)?.max(0) as u64,
        })
    }

    pub fn zombie(&self) -> bool {
        self.state == 'Z'
    }

    /// Whether its (main) thread has begun to exit (the kernel's `PF_EXITING`): it is on its
    /// way out, though not yet a zombie (the init of a PID namespace, say, while the kernel
    /// kills and waits for what else runs in it).
    pub fn exiting(&self) -> bool {
        const PF_EXITING: u32 = 0x4;
        self.flags & PF_EXITING != 0
    }
}

/// The pids /proc lists now.
pub fn pids() -> impl Iterator<Item = i32> {
    (std::fs::read_dir("/proc").into_iter().flatten().flatten())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
}

/// The parent of `pid`, from /proc/PID/stat (`None` when it is gone).
pub fn parent_of(pid: i32) -> Option<i32> {
    ProcStat::read(pid).map(|s| s.ppid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_fields_after_a_command_name_with_spaces_and_parentheses() {
        let text = "4242 (a) b (c) S 17 4242 4242 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 \
                    987654 12345678 321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(
            ProcStat::parse(text),
            Some(ProcStat {
                comm: "a) b (c".into(),
                state: 'S',
                ppid: 17,
                pgrp: 4242,
                flags: 4194560,
                cpu_ticks: 13,
                start_ticks: 987654,
                rss_pages: 321,
            })
        );
        assert_eq!(ProcStat::parse("4242 (a) S 17"), None);
        assert_eq!(ProcStat::parse(""), None);
    }

    #[test]
    fn reads_this_process() {
        let me = ProcStat::read(std::process::id() as i32).unwrap();
        assert_eq!(me.ppid as u32, std::os::unix::process::parent_id());
        assert!(!me.zombie());
        assert!(me.rss_pages > 0);
    }
}
