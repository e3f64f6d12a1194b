//! The NCCL tuner-plugin file: what the model writes reads back, and no input makes the
//! reader panic (it reads files people edit by hand).

use proptest::prelude::*;
use xirang_collective::cost::Platform;
use xirang_collective::tuner_csv::{ALL_SIZES_MAX_BYTES, parse, render, rows};

#[test]
fn written_files_read_back_for_several_platforms() {
    for (nics, nodes, gpus) in [(8, 2, 8), (1, 2, 1), (4, 16, 4)] {
        let mut p = Platform::of_nics(nics, 400.0);
        p.nodes = nodes;
        p.gpus_per_node = gpus;
        let r = rows(&p);
        let back = parse(&render(&["header".into()], &r)).unwrap();
        assert_eq!(back, r);
        assert!(
            back.iter()
                .all(|x| x.n_nodes == i64::from(nodes) && x.n_ranks == i64::from(nodes * gpus))
        );
        assert!(back.iter().any(|x| x.max_bytes == ALL_SIZES_MAX_BYTES));
    }
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(s in "[a-z0-9,#\\- \\n]{0,200}") {
        let _ = parse(&s);
    }
}
