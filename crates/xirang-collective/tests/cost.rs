//! Properties of the cost model.

use xirang_collective::cost::{
    Algo, Coll, GpuGen, Platform, Proto, all, choose, predict, ring_tree_crossover,
};

fn platform(nodes: u32, gpus: u32, nics: u32, nic_gbps: f64) -> Platform {
    Platform {
        generation: GpuGen::Hopper,
        amd_cpu: false,
        nodes,
        gpus_per_node: gpus,
        intra_gbs: 360.0,
        nvlink: true,
        node_net_gbs: f64::from(nics) * nic_gbps / 8.0,
        channels: 2 * nics,
        nvls: false,
    }
}

#[test]
fn time_grows_with_size_and_bandwidth_saturates() {
    let p = platform(8, 8, 8, 400.0);
    for coll in [
        Coll::AllReduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::AllToAll,
    ] {
        let mut last = 0.0;
        let mut last_bw = 0.0;
        for k in 10..34 {
            let best = choose(coll, 1 << k, &p).unwrap();
            assert!(best.time_us > last, "{coll:?} at 2^{k}");
            assert!(
                best.busbw_gbs >= last_bw * 0.999,
                "{coll:?}: bus bandwidth never drops with size"
            );
            last = best.time_us;
            last_bw = best.busbw_gbs;
        }
    }
}

#[test]
fn small_messages_use_ll_large_ones_a_bandwidth_protocol() {
    let p = platform(4, 8, 8, 400.0);
    assert_eq!(choose(Coll::AllReduce, 1024, &p).unwrap().proto, Proto::Ll);
    // LL halves the bandwidth; large messages go to LL128 or Simple (on Hopper NCCL keeps
    // LL128 up to large sizes when its caps do not bind) and get close to the path's speed.
    let big = choose(Coll::AllReduce, 1 << 30, &p).unwrap();
    assert_ne!(big.proto, Proto::Ll, "{big:?}");
    assert!(big.busbw_gbs > 0.8 * p.node_net_gbs.min(p.intra_gbs), "{big:?}");
}

#[test]
fn ring_is_bounded_by_the_nics_and_tree_by_twice_that() {
    let p = platform(16, 8, 8, 400.0);
    let big = 1u64 << 33;
    let ring = predict(Coll::AllReduce, Algo::Ring, Proto::Simple, big, &p).unwrap();
    let tree = predict(Coll::AllReduce, Algo::Tree, Proto::Simple, big, &p).unwrap();
    let path = p.node_net_gbs.min(p.intra_gbs);
    assert!(ring.busbw_gbs <= path && ring.busbw_gbs > 0.9 * path, "{ring:?}");
    // Beyond two nodes the busiest tree node moves two buffers per direction: about the
    // ring's bus bandwidth. With two nodes it moves one: the tree's advantage.
    assert!(tree.busbw_gbs <= path * 1.001, "{tree:?}");
    let two = platform(2, 8, 8, 100.0);
    let t2 = predict(Coll::AllReduce, Algo::Tree, Proto::Simple, big, &two).unwrap();
    let r2 = predict(Coll::AllReduce, Algo::Ring, Proto::Simple, big, &two).unwrap();
    assert!(t2.busbw_gbs > 1.5 * r2.busbw_gbs, "{t2:?} vs {r2:?}");
    // Inside one node there is no tree and the ring runs at the GPU links' speed.
    let one = platform(1, 8, 8, 400.0);
    assert!(
        all(Coll::AllReduce, big, &one)
            .iter()
            .all(|x| x.algo == Algo::Ring)
    );
    let r1 = predict(Coll::AllReduce, Algo::Ring, Proto::Simple, big, &one).unwrap();
    assert!((r1.busbw_gbs / one.intra_gbs - 1.0).abs() < 0.01);
}

#[test]
fn ring_and_tree_cross_over() {
    // A few nodes: the tree's shorter latency wins small messages, the ring's higher
    // efficiency large ones.
    let p = platform(4, 8, 8, 100.0);
    let x = ring_tree_crossover(&p).expect("ring and tree cross");
    assert!(x > 1 << 12 && x < 1 << 34, "crossover at {x}");
    assert_eq!(choose(Coll::AllReduce, 1 << 10, &p).unwrap().algo, Algo::Tree);
    assert_eq!(choose(Coll::AllReduce, 1 << 33, &p).unwrap().algo, Algo::Ring);
    // Many nodes: the ring's latency grows with every rank and the tree wins throughout.
    let many = platform(128, 8, 8, 400.0);
    assert_eq!(choose(Coll::AllReduce, 1 << 33, &many).unwrap().algo, Algo::Tree);
}

#[test]
fn tree_load_of_small_trees() {
    use xirang_collective::cost::tree_load;
    assert_eq!(tree_load(2), 1.0);
    assert_eq!(tree_load(4), 2.0);
    assert_eq!(tree_load(64), 2.0);
}

#[test]
fn nvls_beats_the_ring_inside_an_nvswitch_node() {
    let mut p = platform(1, 8, 8, 400.0);
    p.nvls = true;
    let big = 1u64 << 34;
    let best = choose(Coll::AllReduce, big, &p).unwrap();
    assert_eq!(best.algo, Algo::Nvls);
    // One buffer per direction on each GPU's links, with NVLS efficiency 0.85 and one
    // channel of 16 kept back: 360 x 0.85 x 15/16 x 2 x 7/8.
    let expect = 360.0 * 0.85 * 15.0 / 16.0 * 1.75;
    assert!((best.busbw_gbs / expect - 1.0).abs() < 0.01, "{best:?}");
    // Without NVSwitch (or before Hopper) there is no NVLS.
    p.nvls = false;
    assert_eq!(choose(Coll::AllReduce, big, &p).unwrap().algo, Algo::Ring);
    // NVLS exists only for AllReduce.
    p.nvls = true;
    assert!(all(Coll::AllGather, big, &p).iter().all(|x| x.algo == Algo::Ring));
    // Between nodes NVLS becomes NVLSTree, bounded by the tree's network load.
    let mut m = platform(4, 8, 8, 400.0);
    m.nvls = true;
    let t = predict(Coll::AllReduce, Algo::NvlsTree, Proto::Simple, big, &m).unwrap();
    assert!(t.algbw_gbs <= m.node_net_gbs / 2.0 + 1e-9, "{t:?}");
    assert!(predict(Coll::AllReduce, Algo::Nvls, Proto::Simple, big, &m).is_none());
}
