//! Finding every descendant of a process through /proc, for `--kill-descendants` and
//! `--wait-all`, which must reach grandchildren that are not (yet) our own children.

use super::stat::{parent_of, pids};

/// The pids of every live descendant of `root` (children, their children, and so on), read
/// from /proc. Processes that vanish while we read are skipped. Zombies are included: they are
/// still descendants until reaped, and signalling them is harmless.
pub fn descendants_of(root: i32) -> Vec<i32> {
    // (parent, child) pairs sorted by parent: a plain sorted Vec keeps the PID 1 build small.
    let mut edges: Vec<(i32, i32)> = pids()
        .filter_map(|pid| Some((parent_of(pid)?, pid)))
        .collect();
    edges.sort_unstable();
    let mut found = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        let start = edges.partition_point(|&(parent, _)| parent < p);
        for &(parent, child) in &edges[start..] {
            if parent != p {
                break;
            }
            found.push(child);
            stack.push(child);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_grandchild() {
        // sh starts a sleep and waits for it: the sleep is our grandchild.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & echo started; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let me = std::process::id() as i32;
        let found = descendants_of(me);
        let sh = child.id() as i32;
        assert!(found.contains(&sh), "{found:?} lacks sh {sh}");
        let grandchildren: Vec<i32> = found
            .iter()
            .copied()
            .filter(|&p| parent_of(p) == Some(sh))
            .collect();
        assert_eq!(grandchildren.len(), 1, "{found:?}");
        for p in grandchildren {
            std::process::Command::new("kill")
                .arg(p.to_string())
                .status()
                .unwrap();
        }
        child.wait().unwrap();
    }
}
