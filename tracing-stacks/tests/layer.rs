//! The layer publishes the innermost entered span of each thread, and nothing outside spans.

use tracing_stacks::{CANARY, HEADER_LEN};
use tracing_subscriber::prelude::*;

/// The current thread's published record as (span id, parent id, name), or `None`.
fn published() -> Option<(u64, u64, String)> {
    let (p, canary) = tracing_stacks::current();
    assert_eq!(canary, CANARY);
    if p.is_null() {
        return None;
    }
    // SAFETY: a published record lives while its span is entered (it is here).
    let header = unsafe { std::slice::from_raw_parts(p, HEADER_LEN) };
    let attrs = u16::from_le_bytes([header[26], header[27]]) as usize;
    // SAFETY: as above; the header says how many attribute bytes follow.
    let all = unsafe { std::slice::from_raw_parts(p, HEADER_LEN + attrs) };
    let span = u64::from_be_bytes(all[16..24].try_into().unwrap());
    let (mut parent, mut name) = (0, String::new());
    let mut rest = &all[HEADER_LEN..];
    while let [key, len, tail @ ..] = rest {
        let v = &tail[..*len as usize];
        match key {
            0 => name = String::from_utf8(v.to_vec()).unwrap(),
            1 => parent = u64::from_be_bytes(v.try_into().unwrap()),
            _ => {}
        }
        rest = &tail[*len as usize..];
    }
    Some((span, parent, name))
}

#[test]
fn nested_spans_threads_and_reentry() {
    let subscriber = tracing_subscriber::registry().with(tracing_stacks::layer());
    tracing::subscriber::with_default(subscriber, || {
        assert_eq!(published(), None);
        let outer = tracing::info_span!("outer");
        let outer_id;
        {
            let _o = outer.enter();
            let (id, parent, name) = published().unwrap();
            assert_eq!((parent, name.as_str()), (0, "outer"));
            outer_id = id;
            let inner = tracing::info_span!("inner");
            {
                let _i = inner.enter();
                let (iid, parent, name) = published().unwrap();
                assert_eq!((parent, name.as_str()), (outer_id, "inner"));
                assert_ne!(iid, outer_id);
            }
            // Back in outer after leaving inner.
            assert_eq!(published().unwrap().0, outer_id);
        }
        assert_eq!(published(), None);
        // Re-entering the same span publishes the same id; a new span with the same name
        // gets a new one.
        outer.in_scope(|| assert_eq!(published().unwrap().0, outer_id));
        let again = tracing::info_span!("outer");
        again.in_scope(|| assert_ne!(published().unwrap().0, outer_id));

        // Another thread entering the span carries it; this thread does not.
        let o2 = outer.clone();
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                assert_eq!(published(), None);
                o2.in_scope(|| assert_eq!(published().unwrap().0, outer_id));
                assert_eq!(published(), None);
            })
        })
        .join()
        .unwrap();
        assert_eq!(published(), None);
    });
}
