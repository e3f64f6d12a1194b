//! Validation of `[workloads]`: every endpoint, host list, size and dependency of each
//! workload against the built fabric. It reports; resolving names to ids is
//! `Scenario::build`'s, after validation passed.

use super::*;

use crate::limits::MAX_STRAGGLER_FACTOR;

/// What every workload's checks share: the fabric, its classes and which NICs links join.
struct Check<'a> {
    fabric: &'a Fabric,
    classes: &'a BTreeMap<String, crate::config::TrafficClass>,
    parts: Vec<usize>,
}

/// Why `b` is out of `a`'s reach.
fn no_path(a: &str, b: &str) -> String {
    format!("`{b}` cannot be reached from `{a}`: no links join their NICs")
}

impl Check<'_> {
    fn class(&self, c: &str, at: &KeyPath, d: &mut Diagnostics) {
        if !self.classes.contains_key(c) {
            d.error(
                at,
                unknown_name("traffic class", c, self.classes.keys().map(String::as_str)),
            );
        }
    }

    fn endpoint(&self, e: &str, at: &KeyPath, d: &mut Diagnostics) {
        if let Err(m) = resolve_endpoint(self.fabric, e) {
            d.error(at, m);
        }
    }

    fn start(&self, s: f64, at: &KeyPath, d: &mut Diagnostics) {
        limits::check_time_us(s, at, d);
    }

    /// Every pair of NICs a workload joins must have a path of links between them: the
    /// simulator routes every flow before it starts.
    fn unreachable(&self, a: &str, b: &str) -> bool {
        let part = |e: &str| {
            resolve_endpoint(self.fabric, e)
                .ok()
                .map(|n| self.parts[n.index()])
        };
        matches!((part(a), part(b)), (Some(x), Some(y)) if x != y)
    }

    /// A set of hosts that must all reach each other (`all` when the workload uses every
    /// host).
    fn joined(&self, list: &[String], at: &KeyPath, d: &mut Diagnostics) {
        let names: Vec<String> = if list.is_empty() {
            self.fabric
                .hosts
                .iter()
                .filter(|h| !h.nics.is_empty())
                .map(|h| h.name.clone())
                .collect()
        } else {
            list.to_vec()
        };
        if let Some(first) = names.first()
            && let Some(i) = names.iter().position(|x| self.unreachable(first, x))
        {
            let at = if list.is_empty() { at.clone() } else { at.index(i) };
            d.error(&at, no_path(first, &names[i]));
        }
    }

    fn same_nic(&self, a: &str, b: &str) -> bool {
        match (resolve_endpoint(self.fabric, a), resolve_endpoint(self.fabric, b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
    }

    /// Endpoints listed twice in a set that must be distinct NICs.
    fn distinct(&self, list: &[String], at: &KeyPath, d: &mut Diagnostics) {
        for (i, x) in list.iter().enumerate() {
            if let Some(j) = list[..i].iter().position(|y| self.same_nic(x, y)) {
                d.error(
                    &at.index(i),
                    format!(
                        "`{x}` is the same NIC as entry {j} (`{}`); list each NIC once",
                        list[j]
                    ),
                );
            }
        }
    }
}

impl Scenario {
    pub(super) fn validate_workload(&self, w: &Workload, fabric: &Fabric, at: &KeyPath, d: &mut Diagnostics) {
        let k = Check {
            fabric,
            classes: &self.config.classes,
            parts: fabric.nic_components(),
        };
        k.class(w.class(), &at.key("class"), d);
        match w {
            Workload::Flows(f) => flows(&k, f, at, d),
            Workload::Incast(x) => incast(&k, x, at, d),
            Workload::Permutation(x) => host_set(&k, &x.hosts, x.bytes, x.start_us, at, d),
            Workload::AllToAll(x) => host_set(&k, &x.hosts, x.bytes, x.start_us, at, d),
            Workload::Collective(x) => collective(&k, x, at, d),
            Workload::Inference(x) => inference(&k, x, at, d),
            Workload::HpccFlows(h) => {
                limits::check_time_us(h.time_offset_us, &at.key("time_offset_us"), d);
            }
            Workload::Moe(x) => moe(&k, x, at, d),
            Workload::KvTransfer(x) => kv_transfer(&k, x, at, d),
        }
    }
}

fn flows(k: &Check<'_>, f: &crate::workload::FlowsSpec, at: &KeyPath, d: &mut Diagnostics) {
    // Ids name flows for `after`: two flows with one id would make `after` ambiguous.
    let mut ids: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, fl) in f.list.iter().enumerate() {
        let Some(id) = fl.id.as_deref() else { continue };
        if let Some(first) = ids.insert(id, i) {
            ids.insert(id, first);
            d.error(
                &at.key("list").index(i).key("id"),
                format!("expected a flow id unique in the list, found `{id}` again (first at list[{first}])"),
            );
        }
    }
    for (i, fl) in f.list.iter().enumerate() {
        let at = at.key("list").index(i);
        k.endpoint(&fl.src, &at.key("src"), d);
        k.endpoint(&fl.dst, &at.key("dst"), d);
        if k.same_nic(&fl.src, &fl.dst) {
            d.error(
                &at.key("dst"),
                format!("`{}` is the sender's own NIC; a flow needs two NICs", fl.dst),
            );
        } else if k.unreachable(&fl.src, &fl.dst) {
            d.error(&at.key("dst"), no_path(&fl.src, &fl.dst));
        }
        k.start(fl.start_us, &at.key("start_us"), d);
        if let Some(c) = &fl.class {
            k.class(c, &at.key("class"), d);
        }
        if let Some(p) = fl.priority
            && p > 7
        {
            d.error(
                &at.key("priority"),
                format!("expected a priority 0..7, found {p}"),
            );
        }
        limits::check_transfer_bytes(fl.bytes, &at.key("bytes"), d);
        for a in &fl.after {
            if !ids.contains_key(a.as_str()) {
                let mut known: Vec<&str> = ids.keys().copied().collect();
                known.sort_unstable();
                d.error(&at.key("after"), unknown_name("flow id", a, known.into_iter()));
            }
        }
    }
    if let Some((i, cycle)) = after_cycle(&f.list) {
        d.error(
            &at.key("list").index(i).key("after"),
            format!("flows wait for each other in a cycle: {}", cycle.join(" -> ")),
        );
    }
}

fn incast(k: &Check<'_>, x: &crate::workload::IncastSpec, at: &KeyPath, d: &mut Diagnostics) {
    k.endpoint(&x.receiver, &at.key("receiver"), d);
    for (i, s) in x.sender_hosts.iter().enumerate() {
        k.endpoint(s, &at.key("sender_hosts").index(i), d);
        if k.same_nic(s, &x.receiver) {
            d.error(
                &at.key("sender_hosts").index(i),
                format!("`{s}` is the receiver's NIC; it cannot send to itself"),
            );
        } else if k.unreachable(&x.receiver, s) {
            d.error(&at.key("sender_hosts").index(i), no_path(&x.receiver, s));
        }
    }
    if x.sender_hosts.is_empty()
        && let Some(h) = k
            .fabric
            .hosts
            .iter()
            .find(|h| !h.nics.is_empty() && k.unreachable(&x.receiver, &h.name))
    {
        d.error(
            &at.key("receiver"),
            format!(
                "{}; senders are picked among every host: list reachable ones in `sender_hosts`",
                no_path(&x.receiver, &h.name)
            ),
        );
    }
    if x.senders.is_none() && x.sender_hosts.is_empty() {
        d.error(
            at,
            "expected `senders` (a count) or `sender_hosts` (a list)".to_string(),
        );
    }
    if let Some(n) = x.senders
        && n.get() as usize >= k.fabric.hosts.len()
    {
        d.error(
            &at.key("senders"),
            format!(
                "expected fewer senders than the {} hosts, found {n}",
                k.fabric.hosts.len()
            ),
        );
    }
    limits::check_transfer_bytes(x.bytes, &at.key("bytes"), d);
    k.start(x.start_us, &at.key("start_us"), d);
}

/// A permutation's or an all-to-all's hosts: distinct NICs that all reach each other.
fn host_set(k: &Check<'_>, hosts: &[String], bytes: u64, start_us: f64, at: &KeyPath, d: &mut Diagnostics) {
    for (i, s) in hosts.iter().enumerate() {
        k.endpoint(s, &at.key("hosts").index(i), d);
    }
    k.distinct(hosts, &at.key("hosts"), d);
    k.joined(hosts, &at.key("hosts"), d);
    limits::check_transfer_bytes(bytes, &at.key("bytes"), d);
    k.start(start_us, &at.key("start_us"), d);
}

fn collective(k: &Check<'_>, x: &crate::workload::CollectiveSpec, at: &KeyPath, d: &mut Diagnostics) {
    if let Some(ch) = x.channels
        && (ch == 0 || ch > crate::config::NCCL_MAX_CHANNELS)
    {
        d.error(
            &at.key("channels"),
            format!(
                "expected 1..{} channels, found {ch}",
                crate::config::NCCL_MAX_CHANNELS
            ),
        );
    }
    if !(1..=limits::MAX_ITERATIONS).contains(&x.iterations) {
        d.error(
            &at.key("iterations"),
            format!(
                "expected 1..={} iterations, found {}",
                limits::MAX_ITERATIONS,
                x.iterations
            ),
        );
    }
    limits::check_time_us(x.step_us, &at.key("step_us"), d);
    limits::check_transfer_bytes(x.bytes, &at.key("bytes"), d);
    for (i, st) in x.stragglers.iter().enumerate() {
        let sat = at.key("stragglers").index(i);
        if !(st.factor.is_finite() && (1.0..=MAX_STRAGGLER_FACTOR).contains(&st.factor)) {
            d.error(
                &sat.key("factor"),
                format!(
                    "expected a slowdown of 1 to {MAX_STRAGGLER_FACTOR} (times the time per slice), found {}",
                    limits::Num(st.factor)
                ),
            );
        }
        if k.fabric.host_by_name(&st.host).is_none() {
            d.error(
                &sat.key("host"),
                unknown_name("host", &st.host, k.fabric.hosts.iter().map(|h| h.name.as_str())),
            );
        } else if !x.hosts.is_empty() && !x.hosts.contains(&st.host) {
            d.error(
                &sat.key("host"),
                format!("expected one of the collective's hosts, found `{}`", st.host),
            );
        }
    }
    k.distinct(&x.hosts, &at.key("hosts"), d);
    for (i, h) in x.hosts.iter().enumerate() {
        if k.fabric.host_by_name(h).is_none() {
            d.error(
                &at.key("hosts").index(i),
                unknown_name("host", h, k.fabric.hosts.iter().map(|h| h.name.as_str())),
            );
        }
    }
    k.start(x.start_us, &at.key("start_us"), d);
}

fn inference(k: &Check<'_>, x: &crate::workload::InferenceSpec, at: &KeyPath, d: &mut Diagnostics) {
    for (key, list) in [("clients", &x.clients), ("servers", &x.servers)] {
        if list.is_empty() {
            d.error(&at.key(key), "expected at least one endpoint".to_string());
        }
        for (i, s) in list.iter().enumerate() {
            k.endpoint(s, &at.key(key).index(i), d);
        }
    }
    for (i, c) in x.clients.iter().enumerate() {
        if let Some(sv) = x.servers.iter().find(|sv| k.same_nic(c, sv)) {
            d.error(
                &at.key("clients").index(i),
                format!("`{c}` is also a server (`{sv}`); a NIC cannot send requests to itself"),
            );
        } else if let Some(sv) = x.servers.iter().find(|sv| k.unreachable(c, sv)) {
            d.error(&at.key("clients").index(i), no_path(c, sv));
        }
    }
    poisson_requests(
        Some(x.clients.len()),
        x.requests_per_sec,
        x.duration_us,
        &at.key("requests_per_sec"),
        d,
    );
    for (key, dist) in [("request", &x.request), ("response", &x.response)] {
        if let Err(m) = dist.check() {
            d.error(&at.key(key), m);
        }
    }
    if let Some(share) = x.local_share
        && !(0.0..=1.0).contains(&share)
    {
        d.error(
            &at.key("local_share"),
            format!("expected a share between 0 and 1, found {}", limits::Num(share)),
        );
    }
    k.start(x.start_us, &at.key("start_us"), d);
    limits::check_period_us(x.duration_us, &at.key("duration_us"), d);
    limits::check_time_us(x.service_us, &at.key("service_us"), d);
}

/// A Poisson request rate (`at`: its key) and the requests it makes over `duration_us`:
/// above 0, at most [`limits::MAX_INFERENCE_REQUESTS`] (every request is created before
/// the run starts), and at least one on average (a rate so low that no request is ever
/// made is an empty workload, not a light one: 1e-300 requests/s once passed).
/// `clients`: the senders each making requests at that rate (none: the rate is the
/// workload's). The duration itself is checked at its own key by the caller.
fn poisson_requests(clients: Option<usize>, rate: f64, duration_us: f64, at: &KeyPath, d: &mut Diagnostics) {
    if !(rate.is_finite() && rate > 0.0) {
        d.error(at, format!("expected a rate > 0, found {}", limits::Num(rate)));
        return;
    }
    if !(duration_us.is_finite() && duration_us > 0.0) {
        return;
    }
    let expected = clients.unwrap_or(1) as f64 * rate * duration_us / 1e6;
    let who = clients.map_or_else(String::new, |c| format!("{c} clients at "));
    let (rate, duration) = (limits::Num(rate), limits::Num(duration_us));
    if expected > limits::MAX_INFERENCE_REQUESTS {
        let lower = if clients.is_some() {
            "the rate, the duration or the clients"
        } else {
            "the rate or the duration"
        };
        d.error(
            at,
            format!(
                "{who}{rate} requests/s for {duration} µs make about {expected:.3e} requests; expected at most {:e} per workload (lower {lower})",
                limits::MAX_INFERENCE_REQUESTS
            ),
        );
    } else if expected < 1.0 {
        d.error(
            at,
            format!(
                "{who}{rate} requests/s for {duration} µs make {expected:.3e} requests on average; expected at least one on average (arrivals are Poisson: such a workload most likely sends nothing)"
            ),
        );
    }
}

/// A cycle in the `after` dependencies of explicit flows: the index of a flow on it and
/// the ids around it. Iterative, and linear in the list and its `after` entries: a
/// generated list of a million flows in one chain must neither overflow the stack nor
/// take quadratic time.
fn after_cycle(list: &[crate::workload::FlowSpec]) -> Option<(usize, Vec<String>)> {
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, f) in list.iter().enumerate() {
        if let Some(id) = f.id.as_deref() {
            index.entry(id).or_insert(i);
        }
    }
    // Colours: 0 unvisited, 1 on the current path, 2 done.
    let mut colour = vec![0u8; list.len()];
    // The current path: each flow with the position of the next `after` entry to follow.
    let mut path: Vec<(usize, usize)> = Vec::new();
    for root in 0..list.len() {
        if colour[root] != 0 {
            continue;
        }
        colour[root] = 1;
        path.push((root, 0));
        while let Some(&mut (i, ref mut next)) = path.last_mut() {
            let Some(a) = list[i].after.get(*next) else {
                colour[i] = 2;
                path.pop();
                continue;
            };
            *next += 1;
            let Some(&j) = index.get(a.as_str()) else { continue };
            match colour[j] {
                0 => {
                    colour[j] = 1;
                    path.push((j, 0));
                }
                1 => {
                    let start = path.iter().position(|(x, _)| *x == j).expect("on the path");
                    let mut names: Vec<String> = path[start..]
                        .iter()
                        .map(|(k, _)| list[*k].id.clone().unwrap_or_default())
                        .collect();
                    names.push(list[j].id.clone().unwrap_or_default());
                    return Some((j, names));
                }
                _ => {}
            }
        }
    }
    None
}

impl SizeDist {
    /// Checks the distribution is usable.
    pub fn check(&self) -> Result<(), String> {
        let max = limits::MAX_TRANSFER_BYTES;
        let largest = match self {
            SizeDist::Fixed(b) => *b,
            SizeDist::Uniform { max_bytes, .. } => *max_bytes,
            SizeDist::Cdf(points) => points.iter().map(|p| p.0).max().unwrap_or(0),
        };
        if largest > max {
            return Err(format!(
                "expected sizes of at most {max} bytes (1 TiB), found {largest}"
            ));
        }
        match self {
            SizeDist::Fixed(0) => Err("expected a size >= 1 byte, found 0".to_string()),
            SizeDist::Fixed(_) => Ok(()),
            SizeDist::Uniform { min_bytes, max_bytes } if *min_bytes == 0 || min_bytes > max_bytes => Err(
                format!("expected 1 <= min_bytes <= max_bytes, found {min_bytes} and {max_bytes}"),
            ),
            SizeDist::Uniform { .. } => Ok(()),
            SizeDist::Cdf(points) => {
                let ok = !points.is_empty()
                    && points.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
                    && points.iter().all(|p| p.0 >= 1 && (0.0..=1.0).contains(&p.1))
                    && (points.last().map(|p| p.1) == Some(1.0));
                if ok {
                    Ok(())
                } else {
                    Err("expected a CDF of [bytes, probability] points, increasing in both, ending at probability 1".to_string())
                }
            }
        }
    }
}

/// An integer key within `lo..=hi`, else an error at it naming the range and `what`.
fn int_in(v: u64, lo: u64, hi: u64, what: &str, at: &KeyPath, d: &mut Diagnostics) -> bool {
    let ok = (lo..=hi).contains(&v);
    if !ok {
        d.error(at, format!("expected {lo} to {hi} {what}, found {v}"));
    }
    ok
}

/// Hosts of a serving pool: known, with a NIC, each once, and reaching each other.
fn host_list(k: &Check<'_>, hosts: &[String], at: &KeyPath, d: &mut Diagnostics) {
    for (i, h) in hosts.iter().enumerate() {
        if k.fabric.host_by_name(h).is_none() {
            d.error(
                &at.index(i),
                unknown_name("host", h, k.fabric.hosts.iter().map(|h| h.name.as_str())),
            );
        } else if k.fabric.hosts[k.fabric.host_by_name(h).expect("known").index()]
            .nics
            .is_empty()
        {
            d.error(&at.index(i), format!("host `{h}` has no NIC"));
        } else if let Some(j) = hosts[..i].iter().position(|x| x == h) {
            d.error(
                &at.index(i),
                format!("`{h}` is listed twice (first at {j}); list each host once"),
            );
        }
    }
    k.joined(hosts, at, d);
}

/// GPUs a host contributes as ranks (a host without GPUs is one rank on its first NIC, as
/// in collectives).
fn ranks_of(fabric: &Fabric, hosts: &[String]) -> u64 {
    gpus_per_host(fabric, hosts).iter().sum()
}

/// The ranks each host of a group contributes: the named hosts, or every host with a NIC.
fn gpus_per_host(fabric: &Fabric, hosts: &[String]) -> Vec<u64> {
    let count = |h: &crate::model::Host| h.gpus.len().max(1) as u64;
    if hosts.is_empty() {
        fabric
            .hosts
            .iter()
            .filter(|h| !h.nics.is_empty())
            .map(count)
            .collect()
    } else {
        hosts
            .iter()
            .filter_map(|n| fabric.host_by_name(n))
            .map(|h| count(&fabric.hosts[h.index()]))
            .collect()
    }
}

fn moe(k: &Check<'_>, x: &crate::workload::MoeSpec, at: &KeyPath, d: &mut Diagnostics) {
    use crate::workload::Routing;
    host_list(k, &x.hosts, &at.key("hosts"), d);
    let ranks = ranks_of(k.fabric, &x.hosts);
    if ranks < 2 {
        d.error(
            &at.key("hosts"),
            format!("expected an expert-parallel group of at least 2 GPUs, found {ranks}"),
        );
    }
    if x.mode == crate::workload::MoeMode::Normal {
        same_gpu_counts(k, &x.hosts, &at.key("hosts"), d);
    }
    for (key, v, hi, what) in [
        (
            "experts_per_gpu",
            x.experts_per_gpu,
            limits::MAX_EXPERTS_PER_GPU,
            "experts per GPU",
        ),
        (
            "tokens_per_gpu",
            x.tokens_per_gpu,
            limits::MAX_MOE_TOKENS,
            "tokens per GPU",
        ),
        ("hidden", x.hidden, limits::MAX_HIDDEN, "elements of hidden size"),
        ("layers", x.layers, limits::MAX_MOE_LAYERS, "layers"),
        ("steps", x.steps, limits::MAX_ITERATIONS.into(), "steps"),
        (
            "channels",
            x.channels,
            crate::config::NCCL_MAX_CHANNELS.into(),
            "channels",
        ),
    ] {
        int_in(v.into(), 1, hi, what, &at.key(key), d);
    }
    let experts = ranks * u64::from(x.experts_per_gpu);
    // A token's experts are distinct: at most every expert of the group, and under
    // node-limited routing at most the experts of the hosts it is routed to, which may be
    // the group's smallest.
    let reachable = match x.max_hosts_per_token {
        Some(m) => {
            let mut gpus = gpus_per_host(k.fabric, &x.hosts);
            gpus.sort_unstable();
            let smallest: u64 = gpus.iter().take(m as usize).sum();
            experts.min(smallest * u64::from(x.experts_per_gpu))
        }
        None => experts,
    };
    if int_in(
        x.top_k.into(),
        1,
        limits::MAX_TOP_K,
        "experts per token",
        &at.key("top_k"),
        d,
    ) && ranks >= 2
        && u64::from(x.top_k) > reachable
    {
        d.error(
            &at.key("top_k"),
            format!("expected at most {reachable} experts per token (the distinct experts a token can reach), found {}", x.top_k),
        );
    }
    if let Some(m) = x.max_hosts_per_token {
        int_in(
            m.into(),
            1,
            limits::MAX_GENERATED_NICS,
            "hosts per token",
            &at.key("max_hosts_per_token"),
            d,
        );
    }
    if let Routing::Zipf { exponent } = x.routing
        && !(exponent.is_finite() && exponent > 0.0 && exponent <= limits::MAX_ZIPF_EXPONENT)
    {
        d.error(
            &at.key("routing").key("zipf").key("exponent"),
            format!(
                "expected an exponent above 0 and at most {}, found {}",
                limits::MAX_ZIPF_EXPONENT,
                limits::Num(exponent)
            ),
        );
    }
    limits::check_time_us(x.layer_compute_us, &at.key("layer_compute_us"), d);
    limits::check_time_us(x.expert_compute_us, &at.key("expert_compute_us"), d);
    for (key, v) in [
        ("dispatch_kernel_us", x.dispatch_kernel_us),
        ("combine_kernel_us", x.combine_kernel_us),
    ] {
        if let Some(v) = v {
            limits::check_time_us(v, &at.key(key), d);
        }
    }
    k.start(x.start_us, &at.key("start_us"), d);
    // Every flow is made before the run starts. Low latency: one per (GPU, expert) pair
    // and phase, a count or flag where no token goes; normal: at most one per (GPU, GPU)
    // pair and phase, a forward and its RDMA record included.
    let pairs = match x.mode {
        crate::workload::MoeMode::LowLatency => ranks.saturating_mul(experts),
        crate::workload::MoeMode::Normal => ranks.saturating_mul(ranks).saturating_mul(2),
    };
    let flows = pairs
        .saturating_mul(2)
        .saturating_mul(u64::from(x.layers))
        .saturating_mul(u64::from(x.steps));
    if flows > limits::MAX_GENERATED_FLOWS {
        d.error(
            &at.key("layers"),
            format!(
                "{ranks} GPUs x {} layers x {} steps make up to {flows} message flows; expected at most {} per workload (fewer layers or steps: every layer of a step is alike)",
                x.layers,
                x.steps,
                limits::MAX_GENERATED_FLOWS
            ),
        );
    }
}

/// Normal mode forwards to the GPU of the sender's local index on every host: the group's
/// hosts need one GPU count.
fn same_gpu_counts(k: &Check<'_>, hosts: &[String], at: &KeyPath, d: &mut Diagnostics) {
    // Normal mode forwards to the GPU of the sender's local index on every host.
    let counts: Vec<(String, usize)> = k
        .fabric
        .hosts
        .iter()
        .filter(|h| !h.nics.is_empty() && (hosts.is_empty() || hosts.contains(&h.name)))
        .map(|h| (h.name.clone(), h.gpus.len().max(1)))
        .collect();
    if let Some((name, g)) = counts.iter().find(|c| c.1 != counts[0].1) {
        d.error(
            at,
            format!(
                "normal mode forwards to the GPU of the same local index on each host: expected hosts with one GPU count, found {} on `{}` and {g} on `{name}`",
                counts[0].1, counts[0].0
            ),
        );
    }
}

fn kv_transfer(k: &Check<'_>, x: &crate::workload::KvTransferSpec, at: &KeyPath, d: &mut Diagnostics) {
    for (key, list) in [("prefill", &x.prefill), ("decode", &x.decode)] {
        if list.is_empty() {
            d.error(&at.key(key), "expected at least one host".to_string());
        }
        host_list(k, list, &at.key(key), d);
    }
    for (i, h) in x.decode.iter().enumerate() {
        if x.prefill.contains(h) {
            d.error(
                &at.key("decode").index(i),
                format!("`{h}` is also a prefill host; the two pools are disjoint in disaggregated serving"),
            );
        } else if let Some(p) = x.prefill.iter().find(|p| k.unreachable(p, h)) {
            d.error(&at.key("decode").index(i), no_path(p, h));
        }
    }
    kv_layout(&x.kv, &at.key("kv"), d);
    match x.prompt_tokens.check() {
        Err(m) => d.error(&at.key("prompt_tokens"), m),
        Ok(most) => {
            // Prefill times add up in a host's queue: one request's must leave room.
            let prefill_us = most as f64 * x.prefill_us_per_token;
            if prefill_us > limits::MAX_SIM_TIME_US {
                d.error(
                    &at.key("prefill_us_per_token"),
                    format!(
                        "a prompt of {most} tokens at {} us per token takes {prefill_us:.3e} us to prefill; expected at most {:e} us (an hour)",
                        limits::Num(x.prefill_us_per_token),
                        limits::MAX_SIM_TIME_US
                    ),
                );
            }
            let bytes = u128::from(most) * u128::from(x.kv.bytes_per_token());
            if bytes > u128::from(limits::MAX_TRANSFER_BYTES) {
                d.error(
                    &at.key("prompt_tokens"),
                    format!(
                        "a prompt of {most} tokens at {} KV bytes per token is {bytes} bytes; expected at most {} (1 TiB) per request",
                        x.kv.bytes_per_token(),
                        limits::MAX_TRANSFER_BYTES
                    ),
                );
            }
        }
    }
    poisson_requests(
        None,
        x.requests_per_sec,
        x.duration_us,
        &at.key("requests_per_sec"),
        d,
    );
    limits::check_period_us(x.duration_us, &at.key("duration_us"), d);
    limits::check_time_us(x.prefill_us_per_token, &at.key("prefill_us_per_token"), d);
    int_in(
        x.slice_bytes,
        1,
        limits::MAX_SLICE_BYTES,
        "bytes per slice",
        &at.key("slice_bytes"),
        d,
    );
    if let Some(q) = x.qps {
        int_in(
            q.into(),
            1,
            limits::MAX_KV_QPS,
            "QPs per NIC pair",
            &at.key("qps"),
            d,
        );
    }
    if let Some(n) = x.nics_per_transfer {
        let fewest = x
            .prefill
            .iter()
            .chain(&x.decode)
            .filter_map(|h| k.fabric.host_by_name(h))
            .map(|h| k.fabric.hosts[h.index()].nics.len() as u64)
            .min()
            .unwrap_or(1);
        int_in(
            n.into(),
            1,
            fewest.max(1),
            "NICs per transfer (the fewest NICs of a pool host)",
            &at.key("nics_per_transfer"),
            d,
        );
    }
    k.start(x.start_us, &at.key("start_us"), d);
}

/// The model's KV sizes.
fn kv_layout(kv: &crate::workload::KvLayout, kat: &KeyPath, d: &mut Diagnostics) {
    use crate::workload::KvLayout;
    // (key, value, smallest, largest, what it counts)
    type KeyCheck<'a> = (&'a str, u32, u64, u64, &'a str);
    let (table, checks): (&str, Vec<KeyCheck<'_>>) = match *kv {
        KvLayout::Gqa {
            layers,
            kv_heads,
            head_dim,
            ..
        } => (
            "gqa",
            vec![
                ("layers", layers, 1, limits::MAX_MOE_LAYERS, "layers"),
                ("kv_heads", kv_heads, 1, limits::MAX_KV_HEADS, "KV heads"),
                ("head_dim", head_dim, 1, limits::MAX_HEAD_DIM, "elements per head"),
            ],
        ),
        KvLayout::Mla {
            layers,
            kv_lora_rank,
            rope_head_dim,
            ..
        } => (
            "mla",
            vec![
                ("layers", layers, 1, limits::MAX_MOE_LAYERS, "layers"),
                (
                    "kv_lora_rank",
                    kv_lora_rank,
                    1,
                    limits::MAX_HEAD_DIM,
                    "elements of latent",
                ),
                (
                    "rope_head_dim",
                    rope_head_dim,
                    0,
                    limits::MAX_HEAD_DIM,
                    "elements of RoPE key",
                ),
            ],
        ),
        KvLayout::BytesPerToken(b) => {
            int_in(
                b,
                1,
                limits::MAX_KV_BYTES_PER_TOKEN,
                "bytes per token",
                &kat.key("bytes_per_token"),
                d,
            );
            return;
        }
    };
    for (key, v, lo, hi, what) in checks {
        int_in(v.into(), lo, hi, what, &kat.key(table).key(key), d);
    }
}

impl crate::workload::TokenDist {
    /// Checks the distribution is usable; the largest count it can give.
    pub fn check(&self) -> Result<u64, String> {
        use crate::workload::TokenDist;
        let most = limits::MAX_PROMPT_TOKENS;
        let largest = match self {
            TokenDist::Fixed(n) => *n,
            TokenDist::Uniform { max, .. } => *max,
            TokenDist::Cdf(points) => points.iter().map(|p| p.0).max().unwrap_or(0),
        };
        if largest > most {
            return Err(format!("expected at most {most} tokens, found {largest}"));
        }
        match self {
            TokenDist::Fixed(0) => Err("expected at least 1 token, found 0".to_string()),
            TokenDist::Uniform { min, max } if *min == 0 || min > max => {
                Err(format!("expected 1 <= min <= max, found {min} and {max}"))
            }
            TokenDist::Cdf(points)
                if !(!points.is_empty()
                    && points.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
                    && points.iter().all(|p| p.0 >= 1 && (0.0..=1.0).contains(&p.1))
                    && points.last().map(|p| p.1) == Some(1.0)) =>
            {
                Err("expected a CDF of [tokens, probability] points, increasing in both, ending at probability 1".to_string())
            }
            _ => Ok(largest),
        }
    }

    /// The same distribution read as sizes, for the sampler the size distributions use.
    pub fn as_sizes(&self) -> crate::workload::SizeDist {
        use crate::workload::{SizeDist, TokenDist};
        match self {
            TokenDist::Fixed(n) => SizeDist::Fixed(*n),
            TokenDist::Uniform { min, max } => SizeDist::Uniform {
                min_bytes: *min,
                max_bytes: *max,
            },
            TokenDist::Cdf(p) => SizeDist::Cdf(p.clone()),
        }
    }
}
