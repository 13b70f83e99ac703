use podvisor_core::record::{
    ContainerRecord, ExitRecord, InitRecord, NextRecord, PodRecord, ProcessRecord, StateRecord,
};
use podvisor_core::stage::{Stage, Verdict};

use super::*;

fn sample() -> PodRecord {
    PodRecord {
        pod: "ns/web".into(),
        uid: "0b1c".into(),
        created: 1_795_000_000_000,
        saved: 1_795_000_100_000,
        saved_by: 4242,
        boot: "d1e5-77".into(),
        pod_restarts: 2,
        restarts_all: 3,
        restarting_all: true,
        ended: None,
        containers: vec![
            ContainerRecord {
                skipped: 0,
                name: "app".into(),
                restart_count: 7,
                instance: 8,
                next: NextRecord::Policy,
                stage: Some(Stage::Disabled),
                disabled_at: Some(6),
                verdict: Some(Verdict::Blamed),
                ever_started: true,
                backoff: Some((40_000, 1_795_000_090_000)),
                window: vec![1, 2, 3],
                state: StateRecord::Terminated(ExitRecord {
                    exit_code: 137,
                    signal: Some(9),
                    reason: "Error".into(),
                    message: Some("two\nlines \\ and a backslash".into()),
                    started: Some(10),
                    finished: 20,
                }),
                last: Some(ExitRecord {
                    exit_code: 128,
                    signal: None,
                    reason: "StartError".into(),
                    message: None,
                    started: None,
                    finished: 5,
                }),
                process: None,
            },
            ContainerRecord {
                skipped: 0,
                name: "side".into(),
                restart_count: 0,
                instance: 1,
                next: NextRecord::First,
                stage: None,
                disabled_at: None,
                verdict: None,
                ever_started: false,
                backoff: None,
                window: vec![],
                state: StateRecord::Running(33),
                last: None,
                process: Some(ProcessRecord {
                    pid: 77,
                    start_ticks: 123_456,
                }),
            },
        ],
    }
}

#[test]
fn a_record_reads_back_as_written() {
    let r = sample();
    let text = encode_pod(&r);
    assert!(text.starts_with("podvisor-state 3 pod\n{\n"), "{text}");
    assert_eq!(decode_pod(&text), Ok(r));
    let mut ended = sample();
    ended.ended = Some("Failed".into());
    assert_eq!(decode_pod(&encode_pod(&ended)), Ok(ended));
    let init = InitRecord { starts: 9 };
    assert_eq!(decode_init(&encode_init(&init)), Ok(init));
}

#[test]
fn truncated_corrupt_and_newer_files_are_refused() {
    let text = encode_pod(&sample());
    // Any cut short of the whole file.
    for cut in [10, text.len() / 2, text.len() - 1] {
        let e = decode_pod(&text[..cut]).unwrap_err();
        assert!(
            matches!(e, RecordError::Truncated | RecordError::NotState),
            "cut at {cut}: {e:?}"
        );
    }
    assert_eq!(decode_pod(""), Err(RecordError::NotState));
    // One byte changed.
    let edited = text.replacen("\"restartCount\": 7", "\"restartCount\": 1", 1);
    assert_ne!(edited, text);
    assert_eq!(decode_pod(&edited), Err(RecordError::Checksum));
    // Something after the checksum.
    assert_eq!(
        decode_pod(&format!("{text}extra\n")),
        Err(RecordError::Checksum)
    );
    let newer = text.replacen("podvisor-state 3", "podvisor-state 4", 1);
    assert_eq!(decode_pod(&newer), Err(RecordError::Newer { found: 4 }));
    assert_eq!(
        RecordError::Newer { found: 4 }.to_string(),
        "it was written by a newer podvisor (format 4; this one reads formats 1 to 3)"
    );
    assert!(matches!(decode_init(&text), Err(RecordError::Kind { .. })));
}

#[test]
fn bad_fields_name_their_line_and_field() {
    let body = "podvisor-state 3 init\n{\n  \"starts\": \"x\"\n}\n";
    let e = decode_init(&seal(body.into())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 3: field starts: invalid type: string \"x\", expected u32"
    );
    let body = "podvisor-state 3 init\n{\n  \"starts\": 1,\n  \"colour\": \"blue\"\n}\n";
    let e = decode_init(&seal(body.into())).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 4: field colour: unknown field `colour`, expected `starts`"
    );
    let mut r = serde_json::to_value(sample()).unwrap();
    r.as_object_mut().unwrap().remove("uid");
    let body = format!(
        "podvisor-state 3 pod\n{}\n",
        serde_json::to_string_pretty(&r).unwrap()
    );
    let e = decode_pod(&seal(body)).unwrap_err();
    assert!(e.to_string().ends_with("missing field `uid`"), "{e}");
}

/// `body` with the checksum line of formats 1 and 2.
fn seal_fnv(body: String) -> String {
    let sum = fnv(body.as_bytes());
    format!("{body}checksum {sum:016x}\n")
}

/// A record of format 1 (the first release's), as that release wrote it.
fn format_1(body: &str) -> String {
    seal_fnv(format!("podvisor-state 1 {body}"))
}

#[test]
fn format_2_records_are_still_read() {
    // Format 2 is format 3's JSON under the checksum of single bytes.
    let text = encode_pod(&sample());
    let end = text.rfind("checksum ").unwrap();
    let body = text[..end].replacen("podvisor-state 3", "podvisor-state 2", 1);
    let two = seal_fnv(body);
    assert_eq!(decode_pod(&two), Ok(sample()));
    let edited = two.replacen("\"restartCount\": 7", "\"restartCount\": 1", 1);
    assert_eq!(decode_pod(&edited), Err(RecordError::Checksum));
    // Each format is checked with its own checksum.
    let swapped = text.replacen("podvisor-state 3", "podvisor-state 2", 1);
    assert_eq!(decode_pod(&swapped), Err(RecordError::Checksum));
}

#[test]
fn any_one_bit_changed_changes_the_checksum() {
    let text = encode_pod(&sample());
    let bytes = &text.as_bytes()[..200];
    let sum = checksum(bytes);
    for at in 0..bytes.len() {
        for bit in 0..8 {
            let mut changed = bytes.to_vec();
            changed[at] ^= 1 << bit;
            assert_ne!(checksum(&changed), sum, "byte {at}, bit {bit}");
        }
    }
    // So do a byte more or less, even a zero one.
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert_ne!(checksum(&longer), sum);
    assert_ne!(checksum(&bytes[..199]), sum);
}

#[test]
fn format_1_records_are_still_read() {
    let text = format_1(
        "pod\npod ns/web\nuid 0b1c\ncreated 1795000000000\nsaved 1795000100000\n\
         saved-by 4242\nboot d1e5-77\npod-restarts 2\nrestarts-all 3\nrestarting-all\n\
         container app\nrestarts 7\ninstance 8\nnext policy\nstage Disabled\n\
         disabled-at 6\nverdict Blamed\never-started yes\nbackoff 40000 1795000090000\n\
         window 1 2 3\nstate terminated\nstate-exit 137 9 Error 10 20\n\
         state-message two\\nlines \\\\ and a backslash\nlast-exit 128 - StartError - 5\n\
         container side\nrestarts 0\ninstance 1\nnext first\nstate running 33\n\
         process 77 123456\n",
    );
    assert_eq!(decode_pod(&text), Ok(sample()));
    assert_eq!(
        decode_init(&format_1("init\nstarts 9\n")),
        Ok(InitRecord { starts: 9 })
    );
    let e = decode_pod(&format_1(
        "pod\npod ns/web\nuid u\ncreated x\nsaved 1\nboot b\n",
    ))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 4: field created: \"x\" is not a number"
    );
    let e = decode_pod(&format_1(
        "pod\npod ns/web\nuid u\ncreated 1\nsaved 1\nboot b\ncontainer a\ncolour blue\n",
    ))
    .unwrap_err();
    assert_eq!(e.to_string(), "line 8: field colour: unknown field");
    let edited = text.replacen("restarts 7", "restarts 1", 1);
    assert_eq!(decode_pod(&edited), Err(RecordError::Checksum));
}
