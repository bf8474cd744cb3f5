//! `herald-bench rockbench`: RockBench's data generator and data-latency evaluators.
//!
//! Generators (`--generators`, each with its own connection and an equal share of the rate)
//! write events of about 1 KB (nested objects and arrays, a generator id, a microsecond event
//! time `ts`) into collection `events` on a schedule: a fixed rate or a shape such as 50% ->
//! 200% -> 50% (`--shape`), with a share of overwrites of earlier events (`--overwrite`) and a
//! share of sparse or changed schemas (`--sparse`). Each event's `ts` is the time it was *due*,
//! not when it was sent, so a generator that falls behind shows up as latency.
//!
//! Two evaluators measure data latency while the events pour in:
//! - pull (RockBench's own): every `--pull-ms` the newest visible event time is queried
//!   (`sort: {ts: -1}, limit: 1`, served by the automatic index on `ts`); latency = now - ts;
//! - live: a subscription to the newest event; latency = arrival - ts of each new newest event.
//!
//! `--search` finds the highest rate whose pull p95 stays within 100 ms, then within 1 s.

use crate::harness::record::{Recorder, Summary};
use crate::harness::search::CapacitySearch;
use crate::harness::thousands;
use crate::harness::{durability_name, Durability};
use crate::ingest::client::{self, Acks, Via, Writer, BATCH_WRITES_MAX};
use crate::ingest::{with_server, Output, Schedule, ServerUsage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Series of the recorder: pull data latency, live data latency, write acknowledgement, and
/// the pull query's own round trip (part of every pull sample).
const PULL: usize = 0;
const LIVE: usize = 1;
const ACK: usize = 2;
const QUERY: usize = 3;
/// Width of the reported intervals.
const INTERVAL: Duration = Duration::from_secs(1);
/// A run passes a bound when its rate is held within this share.
const RATE_SHARE_MIN: f64 = 0.95;
/// The data-latency bounds of the search, in milliseconds.
pub const SEARCH_BOUNDS_MS: [f64; 2] = [100.0, 1000.0];
const COLLECTION: &str = "events";
/// How long after the schedule's end a generator may still send what was due.
const SEND_GRACE_MS: u64 = 100;

#[derive(Debug, Clone)]
pub struct RockOptions {
    /// Events per second over all generators (the search's first probe with `--search`).
    pub rate: u64,
    pub secs: u64,
    /// Percent of `rate` per equal segment of the run: `[100]` fixed, `[50, 200, 50]` a burst.
    pub shape: Vec<f64>,
    /// Share of events that overwrite an earlier event of their generator (0..1).
    pub overwrite: f64,
    /// Share of events with a sparse or changed schema (0..1).
    pub sparse: f64,
    pub generators: u32,
    pub via: Via,
    /// A generator sends what is due every `batch_ms` (at most 500 events per batch).
    pub batch_ms: u64,
    /// The pull evaluator's period.
    pub pull_ms: u64,
    /// How the evaluators ask for the newest event.
    pub reader: Reader,
    /// Fields exempted from automatic indexing.
    pub exempt: Vec<String>,
    pub durability: Durability,
    /// The server's `--cache-mib`; `None` leaves its default.
    pub cache_mib: Option<u64>,
    pub search: bool,
    /// Search: highest rate tried.
    pub max_rate: u64,
    pub bisect_steps: u32,
    pub seed: u64,
    pub out: Option<PathBuf>,
}

const WORDS: [&str; 48] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "amber", "basalt", "cedar", "dune",
    "ember", "fjord", "granite", "harbor", "island", "jasper", "kelp", "lagoon", "meadow",
    "nectar", "orchid", "prairie", "quartz", "river", "summit", "tundra", "valley", "willow",
];
const KINDS: [&str; 5] = ["click", "view", "purchase", "share", "login"];

fn word(rng: &mut impl Rng) -> &'static str {
    WORDS[rng.gen_range(0..WORDS.len())]
}

/// One event of about 1 KB: generator `gen`, sequence `k`, event time `ts_us`.
pub fn event(rng: &mut impl Rng, gen: u32, k: u64, ts_us: u64, sparse: bool) -> Value {
    let mut text = String::new();
    event_text(rng, gen, k, ts_us, sparse, &mut text);
    serde_json::from_str(&text).expect("the generator writes valid JSON")
}

/// [`event`] written straight as JSON text onto `out`. The generators share the machine with
/// the server, so they write text rather than build a document tree and serialize it (which
/// was most of the bench process's ~20% of a core at 14,000 events/s).
pub fn event_text(
    rng: &mut impl Rng,
    gen: u32,
    k: u64,
    ts_us: u64,
    sparse: bool,
    out: &mut String,
) {
    use std::fmt::Write;
    let w = |out: &mut String, args: std::fmt::Arguments<'_>| {
        out.write_fmt(args).expect("writing to a String");
    };
    let friends = rng.gen_range(1..=10);
    let mut friend_list = String::new();
    for i in 0..friends {
        let sep = if i == 0 { "" } else { "," };
        let (name, since) = (word(rng), rng.gen_range(2000..2026));
        w(
            &mut friend_list,
            format_args!(r#"{sep}{{"name":"{name}","since":{since}}}"#),
        );
    }
    let tags: Vec<&str> = (0..rng.gen_range(1..=6)).map(|_| word(rng)).collect();
    let text_words = rng.gen_range(50..75);
    let kind = KINDS[rng.gen_range(0..KINDS.len())];
    w(
        out,
        format_args!(r#"{{"gen":{gen},"n":{k},"ts":{ts_us},"kind":"{kind}","#),
    );
    let (first, last) = (word(rng), word(rng));
    let (mail, mail_n, age) = (word(rng), rng.gen_range(0..100_000), rng.gen_range(16..90));
    w(
        out,
        format_args!(
            r#""user":{{"name":{{"first":"{first}","last":"{last}"}},"email":"{mail}.{mail_n}@example.com","age":{age}"#
        ),
    );
    let (house, street, city) = (rng.gen_range(1..999), word(rng), word(rng));
    let zip = rng.gen_range(0..100_000);
    let (lat, lon) = (rng.gen_range(-90.0..90.0), rng.gen_range(-180.0..180.0));
    if !sparse {
        w(
            out,
            format_args!(
                r#","address":{{"street":"{house} {street} street","city":"{city}","zip":"{zip:05}","geo":{{"lat":"#
            ),
        );
        float(out, lat);
        out.push_str(r#","lon":"#);
        float(out, lon);
        out.push_str("}}");
    }
    out.push_str(r#"},"tags":["#);
    for (i, t) in tags.iter().enumerate() {
        w(
            out,
            format_args!(r#"{}"{t}""#, if i == 0 { "" } else { "," }),
        );
    }
    out.push(']');
    if !sparse {
        w(out, format_args!(r#","friends":[{friend_list}]"#));
    }
    out.push_str(r#","text":""#);
    for i in 0..text_words {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word(rng));
    }
    out.push_str(r#"","score":"#);
    float(out, rng.gen_range(0.0..100.0));
    let count = rng.gen_range(0..1_000_000);
    let active = rng.gen_bool(0.5);
    if sparse {
        // Fields come and go and change type, as in semi-structured event streams.
        let count = rng.gen_range(0..1000);
        w(out, format_args!(r#","count":"{count}","active":{active}"#));
        let attr = rng.gen_range(0..1000);
        match rng.gen_range(0..3) {
            0 => w(
                out,
                format_args!(r#","attr_{attr}":{}"#, rng.gen_range(0..1000)),
            ),
            1 => w(out, format_args!(r#","attr_{attr}":"{}""#, word(rng))),
            _ => w(
                out,
                format_args!(
                    r#","attr_{attr}":{{"nested":["{}",{}]}}"#,
                    word(rng),
                    rng.gen_range(0..10)
                ),
            ),
        }
        out.push('}');
    } else {
        w(out, format_args!(r#","count":{count},"active":{active}}}"#));
    }
}

/// A float as JSON, always with a fraction or exponent (as serde_json writes one), so it reads
/// back as a float.
fn float(out: &mut String, x: f64) {
    use std::fmt::Write;
    let at = out.len();
    write!(out, "{x}").expect("writing to a String");
    if !out[at..].contains(['.', 'e', 'E']) {
        out.push_str(".0");
    }
}

/// Microseconds since the Unix epoch now.
fn epoch_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A fixed pairing of the monotonic clock with the wall clock, so event times are real
/// microsecond timestamps while latencies are measured on the monotonic clock.
#[derive(Clone, Copy)]
struct Clock {
    start: Instant,
    start_epoch_us: u64,
}

impl Clock {
    fn ts_of(&self, offset_s: f64) -> u64 {
        self.start_epoch_us + (offset_s * 1e6) as u64
    }

    /// Latency of an event with time `ts_us` observed at `at`, in microseconds.
    fn latency_us(&self, ts_us: u64, at: Instant) -> u64 {
        let now_us = self.start_epoch_us as i128
            + at.saturating_duration_since(self.start).as_micros() as i128;
        (now_us - ts_us as i128).max(1) as u64
    }
}

/// How the evaluators ask for the newest event's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reader {
    /// As users write it: no filter, sorted `{ts: -1}`, limit 1 (pull and live).
    #[default]
    Sorted,
    /// With a range on `ts` (`{ts: {$gte: 0}}`), which older planners needed to walk the `ts`
    /// index (pull and live).
    Filtered,
    /// Pull: `POST /v1/aggregate [{$group: {_id: null, ts: {$max: "$ts"}}}]` (the RockBench
    /// seed's `max(_event_time)`); live: the sorted query.
    Group,
}

impl Reader {
    pub fn name(self) -> &'static str {
        match self {
            Reader::Sorted => "sorted",
            Reader::Filtered => "filtered",
            Reader::Group => "group",
        }
    }
}

/// The newest event's time: the live evaluator's query (and the pull evaluator's, unless it
/// aggregates). Both forms walk the automatic `ts` index from its end.
fn newest_query(reader: Reader) -> Value {
    let filter = match reader {
        Reader::Filtered => json!({"ts": {"$gte": 0}}),
        Reader::Sorted | Reader::Group => json!({}),
    };
    json!({"collection": COLLECTION, "filter": filter, "sort": {"ts": -1},
           "limit": 1, "projection": {"ts": 1}})
}

/// The pull evaluator's request; its answer's first document has the newest `ts`.
fn pull_request(reader: Reader) -> Value {
    match reader {
        Reader::Group => json!({"collection": COLLECTION,
            "pipeline": [{"$group": {"_id": null, "ts": {"$max": "$ts"}}}]}),
        r => newest_query(r),
    }
}

/// One generator: its share of the schedule, batched every `batch_ms`.
async fn generate(
    opts: RockOptions,
    gen: u32,
    schedule: Schedule,
    clock: Clock,
    writer: Writer,
) -> Result<u64, String> {
    let mut rng = StdRng::seed_from_u64(opts.seed ^ (u64::from(gen) << 32));
    let total = schedule.total();
    // Events still unsent this long after the schedule's end are dropped: a server that cannot
    // keep up ends the run on time with a lower achieved rate, not a longer run.
    let deadline = clock.start
        + Duration::from_secs_f64(schedule.secs())
        + Duration::from_millis(opts.batch_ms.max(1) + SEND_GRACE_MS);
    let mut k = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(opts.batch_ms.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while k < total && Instant::now() < deadline {
        tick.tick().await;
        let due = schedule.due(clock.start.elapsed().as_secs_f64()).min(total);
        while k < due && Instant::now() < deadline {
            let end = due.min(k + BATCH_WRITES_MAX as u64);
            let t0 = clock.start + Duration::from_secs_f64(schedule.time_of(k));
            let batch: Vec<String> = (k..end)
                .map(|i| {
                    let ts = clock.ts_of(schedule.time_of(i));
                    let sparse = rng.gen_bool(opts.sparse.clamp(0.0, 1.0));
                    let id = if i > 0 && rng.gen_bool(opts.overwrite.clamp(0.0, 1.0)) {
                        rng.gen_range(0..i)
                    } else {
                        i
                    };
                    let mut line = format!(
                        r#"{{"op":"put","collection":"{COLLECTION}","id":"g{gen}-{id}","doc":"#
                    );
                    event_text(&mut rng, gen, i, ts, sparse, &mut line);
                    line.push('}');
                    line
                })
                .collect();
            writer.send_lines(batch, t0).await?;
            k = end;
        }
    }
    writer.flush().await;
    Ok(k)
}

/// What one run measured.
pub struct RunResult {
    pub rate: u64,
    pub secs: u64,
    pub recorder: Recorder,
    /// Events the schedule held; the generators sent, the server acknowledged as applied,
    /// and refused.
    pub scheduled: u64,
    pub sent: u64,
    pub applied: u64,
    pub failed: u64,
    /// Transactions the server committed during the run (each event is one).
    pub counted: u64,
    pub achieved: f64,
    pub peak_rss_kib: Option<u64>,
    /// What the server used, CPU included (`None` until the run is over).
    pub usage: Option<ServerUsage>,
    pub event_bytes: f64,
    /// Target rate per interval.
    pub targets: Vec<f64>,
    /// Times the server closed the live evaluator's connection (a slow consumer) and it
    /// resumed from its last seq.
    pub live_resumes: u64,
}

impl RunResult {
    pub fn pull(&self) -> Summary {
        self.recorder.overall(PULL)
    }

    pub fn live(&self) -> Summary {
        self.recorder.overall(LIVE)
    }

    /// `None` when the run keeps pull p95 within `bound_ms` and its rate, else why not.
    pub fn failure(&self, bound_ms: f64) -> Option<String> {
        let mut why = Vec::new();
        if self.achieved < RATE_SHARE_MIN * self.rate as f64 {
            why.push(format!("rate {:.0}/{}", self.achieved, self.rate));
        }
        if self.failed > 0 {
            why.push(format!("{} failed writes", self.failed));
        }
        let p = self.pull();
        if p.n == 0 || p.p95 > bound_ms {
            why.push(format!("pull p95 {:.1} ms", p.p95));
        }
        (!why.is_empty()).then(|| why.join(", "))
    }

    pub fn to_json(&self) -> Value {
        json!({
            "rate": self.rate, "secs": self.secs, "scheduled": self.scheduled, "sent": self.sent, "applied": self.applied,
            "failed": self.failed, "counted": self.counted, "achieved_per_sec": self.achieved,
            "peak_rss_kib": self.peak_rss_kib, "mean_event_bytes": self.event_bytes,
            "live_resumes": self.live_resumes,
            "cpu": self.usage.map(|u| u.to_json(self.applied)),
            "target_per_interval": self.targets,
            "latency": self.recorder.to_json(),
            "pass_100ms": self.failure(100.0).is_none(), "pass_1s": self.failure(1000.0).is_none(),
        })
    }
}

/// Mean serialized size of a sample of events as the options make them.
fn mean_event_bytes(opts: &RockOptions) -> f64 {
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let n = 200;
    let total: usize = (0..n)
        .map(|i| {
            let sparse = rng.gen_bool(opts.sparse.clamp(0.0, 1.0));
            let mut text = String::new();
            event_text(&mut rng, 0, i, epoch_us(), sparse, &mut text);
            text.len()
        })
        .sum();
    total as f64 / n as f64
}

/// One run at `rate` on a fresh server.
pub async fn run_once(opts: &RockOptions, rate: u64, progress: bool) -> Result<RunResult, String> {
    let (mut r, usage) = with_server(opts.durability, opts.cache_mib, |addr| {
        measure(opts, rate, addr, progress)
    })
    .await?;
    r.peak_rss_kib = usage.peak_rss_kib;
    r.usage = Some(usage);
    Ok(r)
}

async fn measure(
    opts: &RockOptions,
    rate: u64,
    addr: SocketAddr,
    progress: bool,
) -> Result<RunResult, String> {
    let http = crate::harness::http_client();
    if !opts.exempt.is_empty() {
        let body = json!({"collection": COLLECTION, "exemptions": opts.exempt});
        let r = http
            .put(format!("http://{addr}/v1/indexes/exemptions"))
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!(
                "exemptions: {}",
                r.text().await.unwrap_or_default()
            ));
        }
    }
    let seq0 = client::seq(&http, addr).await?;
    let clock = Clock {
        start: Instant::now() + Duration::from_millis(300),
        start_epoch_us: epoch_us() + 300_000,
    };
    let recorder = Recorder::new(
        &["pull", "live", "write ack", "pull query"],
        clock.start,
        INTERVAL,
    );
    let acks = Acks::new(recorder.clone(), ACK);
    let schedule = Schedule::new(rate as f64, &opts.shape, opts.secs as f64);

    // Evaluator (b): a subscription to the newest event.
    let rec = recorder.clone();
    let resumes = Arc::new(AtomicU64::new(0));
    let live = client::subscribe(
        addr,
        newest_query(opts.reader),
        resumes.clone(),
        move |c, at| {
            if c["kind"] == "add" {
                if let Some(ts) = c["doc"]["ts"].as_u64() {
                    rec.record(LIVE, at, clock.latency_us(ts, at));
                }
            }
        },
    )
    .await?;
    // Evaluator (a): poll the newest visible event time while events are due.
    let (rec, pull_http, pull_ms) = (recorder.clone(), http.clone(), opts.pull_ms.max(1));
    let end = clock.start + Duration::from_secs_f64(schedule.secs());
    let q = pull_request(opts.reader);
    let pull = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(pull_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while Instant::now() < end {
            tick.tick().await;
            if Instant::now() < clock.start {
                continue;
            }
            let sent = Instant::now();
            if let Ok(v) = client::query(&pull_http, addr, &q).await {
                let at = Instant::now();
                if let Some(ts) = v["docs"][0]["ts"].as_u64() {
                    rec.record(PULL, at, clock.latency_us(ts, at));
                    rec.record(QUERY, at, at.duration_since(sent).as_micros() as u64);
                }
            }
        }
    });

    let g = opts.generators.max(1);
    let mut gens = Vec::new();
    for i in 0..g {
        let share = Schedule::new(rate as f64 / g as f64, &opts.shape, opts.secs as f64);
        let writer = Writer::connect(addr, opts.via, acks.clone()).await?;
        gens.push(tokio::spawn(generate(
            opts.clone(),
            i,
            share,
            clock,
            writer,
        )));
    }
    let acked_known = opts.via != Via::Stream;
    let ticker = progress.then(|| {
        tokio::spawn(print_progress(
            recorder.clone(),
            schedule.clone(),
            acked_known,
        ))
    });
    let mut sent = 0;
    for h in gens {
        sent += h.await.map_err(|e| e.to_string())??;
    }
    let elapsed = clock.start.elapsed().as_secs_f64();
    let _ = pull.await;
    // The last events' notifications.
    tokio::time::sleep(Duration::from_millis(300)).await;
    live.abort();
    if let Some(t) = ticker {
        t.abort();
    }
    let counted = client::seq(&http, addr).await? - seq0;
    let n_intervals = (schedule.secs() / INTERVAL.as_secs_f64()).ceil() as usize;
    let targets = (0..n_intervals)
        .map(|i| schedule.rate_at((i as f64 + 0.5) * INTERVAL.as_secs_f64()))
        .collect();
    let applied = acks.applied.load(Ordering::Relaxed);
    Ok(RunResult {
        rate,
        secs: opts.secs,
        recorder,
        scheduled: schedule.total(),
        sent,
        applied,
        failed: acks.failed.load(Ordering::Relaxed),
        counted,
        achieved: applied as f64 / elapsed.max(1e-3),
        peak_rss_kib: None,
        usage: None,
        event_bytes: mean_event_bytes(opts),
        targets,
        live_resumes: resumes.load(Ordering::Relaxed),
    })
}

/// A line per interval: target and acknowledged rate (unknown until the end for a streamed
/// request), pull and live p95 of the interval.
async fn print_progress(recorder: Recorder, schedule: Schedule, acked_known: bool) {
    let start = tokio::time::Instant::now();
    for i in 1u32.. {
        tokio::time::sleep_until(start + Duration::from_millis(300) + INTERVAL * i).await;
        let slot = i as usize - 1;
        let ack = recorder.interval(ACK, slot);
        let p95 = |s: Summary| match s.n {
            0 => "-".to_string(),
            _ => format!("{:.1} ms", s.p95),
        };
        eprintln!(
            "[rockbench {:>3} s] target {:>7}/s  acked {:>7}/s  pull p95 {:>10}  live p95 {:>10}",
            i,
            schedule.rate_at(slot as f64 + 0.5) as u64,
            if acked_known {
                ack.n.to_string()
            } else {
                "-".into()
            },
            p95(recorder.interval(PULL, slot)),
            p95(recorder.interval(LIVE, slot)),
        );
    }
}

fn print_table(r: &RunResult, acked_known: bool) {
    println!(
        "\n| t (s) | target ev/s | acked ev/s | pull p50 / p95 / p99 / max ms | live p50 / p95 / p99 / max ms |"
    );
    println!("|---|---|---|---|---|");
    let q = |s: Summary| {
        if s.n == 0 {
            "-".to_string()
        } else {
            format!("{:.1} / {:.1} / {:.1} / {:.1}", s.p50, s.p95, s.p99, s.max)
        }
    };
    for (i, t) in r.targets.iter().enumerate() {
        println!(
            "| {} | {} | {} | {} | {} |",
            i + 1,
            thousands(*t as u64),
            if acked_known {
                thousands(r.recorder.interval(ACK, i).n)
            } else {
                "-".into()
            },
            q(r.recorder.interval(PULL, i)),
            q(r.recorder.interval(LIVE, i)),
        );
    }
    println!(
        "| all | {} | {:.0} | {} | {} |\n",
        thousands(r.rate),
        r.achieved,
        q(r.pull()),
        q(r.live())
    );
    println!(
        "events: scheduled {}, sent {}, applied {}, failed {}, committed by the server {}; mean event {:.0} bytes; server peak RSS {}; live evaluator resumed {} times",
        r.scheduled,
        r.sent,
        r.applied,
        r.failed,
        r.counted,
        r.event_bytes,
        r.peak_rss_kib
            .map_or("unknown".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0)),
        r.live_resumes
    );
    if let Some(u) = &r.usage {
        println!("{}", u.text(r.applied));
    }
    println!(
        "pull query round trip: {}",
        r.recorder.overall(QUERY).text()
    );
    match acked_known {
        true => println!("write ack latency: {}", r.recorder.overall(ACK).text()),
        false => println!("write ack latency: none (one streamed request per generator)"),
    }
}

fn describe(opts: &RockOptions) -> String {
    let shape: Vec<String> = opts.shape.iter().map(|p| format!("{p}%")).collect();
    format!(
        "{} generators via {}, shape {}, overwrite {:.0}%, sparse {:.0}%, durability {}, exempt from indexing: {}",
        opts.generators,
        opts.via.name(),
        shape.join(" -> "),
        opts.overwrite * 100.0,
        opts.sparse * 100.0,
        durability_name(opts.durability),
        if opts.exempt.is_empty() {
            "nothing".into()
        } else {
            opts.exempt.join(", ")
        }
    )
}

fn options_json(opts: &RockOptions) -> Value {
    json!({
        "rate": opts.rate, "secs": opts.secs, "shape_pct": opts.shape, "overwrite": opts.overwrite,
        "sparse": opts.sparse, "generators": opts.generators, "via": opts.via.name(),
        "batch_ms": opts.batch_ms, "pull_ms": opts.pull_ms, "reader": opts.reader.name(), "exempt": opts.exempt,
        "durability": durability_name(opts.durability), "cache_mib": opts.cache_mib,
    })
}

fn charts(out: &Output, r: &RunResult, opts: &RockOptions) -> Result<Value, String> {
    let shape: Vec<String> = opts.shape.iter().map(|p| format!("{p}%")).collect();
    let sub = format!(
        "{} events/s, shape {}, {} generators via {}, overwrite {:.0}%, sparse {:.0}%, {}",
        thousands(r.rate),
        shape.join("->"),
        opts.generators,
        opts.via.name(),
        opts.overwrite * 100.0,
        opts.sparse * 100.0,
        durability_name(opts.durability)
    );
    let t = out.write_chart(
        "latency",
        &r.recorder
            .time_chart("RockBench data latency over time", &sub, &[PULL, LIVE]),
    )?;
    let d = out.write_chart(
        "distribution",
        &r.recorder
            .distribution_chart("RockBench data latency distribution", &sub),
    )?;
    println!("charts: {} {}", t.display(), d.display());
    Ok(json!({"latency_over_time": t, "distribution": d}))
}

/// Refuses options that would make a meaningless run.
fn validate(o: &RockOptions) -> Result<(), String> {
    let share = |v: f64, name: &str| match (0.0..=1.0).contains(&v) {
        true => Ok(()),
        false => Err(format!("--{name} must be a share from 0 to 1, got {v}")),
    };
    share(o.overwrite, "overwrite")?;
    share(o.sparse, "sparse")?;
    if o.rate == 0 || o.secs == 0 || o.generators == 0 || o.batch_ms == 0 || o.pull_ms == 0 {
        return Err(
            "--rate, --secs, --generators, --batch-ms and --pull-ms must be positive".into(),
        );
    }
    if o.shape.iter().any(|p| !p.is_finite() || *p < 0.0) || o.shape.iter().all(|p| *p == 0.0) {
        return Err(format!(
            "--shape takes percentages >= 0, not all 0; got {:?}",
            o.shape
        ));
    }
    if o.search && o.max_rate < o.rate {
        return Err("--max-rate must be at least --rate".into());
    }
    Ok(())
}

pub async fn run(opts: RockOptions) -> Result<(), String> {
    validate(&opts)?;
    let out = Output::new(opts.out.clone(), "rockbench")?;
    println!("rockbench: {}", describe(&opts));
    if opts.search {
        return search(&opts, &out).await;
    }
    let r = run_once(&opts, opts.rate, true).await?;
    print_table(&r, opts.via != Via::Stream);
    let charts = charts(&out, &r, &opts)?;
    out.write_json(&json!({
        "benchmark": "rockbench", "mode": "run", "options": options_json(&opts),
        "result": r.to_json(), "charts": charts,
    }))
}

/// The highest rate with pull p95 within each of [`SEARCH_BOUNDS_MS`].
async fn search(opts: &RockOptions, out: &Output) -> Result<(), String> {
    let mut probes: Vec<RunResult> = Vec::new();
    let mut found = Vec::new();
    let mut start = opts.rate;
    for bound in SEARCH_BOUNDS_MS {
        let mut s = CapacitySearch::new(start, opts.max_rate, opts.bisect_steps);
        while let Some(rate) = s.next() {
            // A rate already run decides again without running twice.
            let known = probes.iter().find(|p| p.rate == rate);
            let pass = match known {
                Some(p) => p.failure(bound).is_none(),
                None => {
                    // `HERALD_BENCH_QUIET_WAIT_SECS=0` skips the wait on a busy machine.
                    crate::harness::quiet::wait_for_quiet().await;
                    let r = run_once(opts, rate, false).await?;
                    let (p, l) = (r.pull(), r.live());
                    println!(
                        "probe {:>7} ev/s: achieved {:>7.0}/s, pull p95 {:>8.1} ms, live p95 {:>8.1} ms, peak RSS {:>6.1} MiB{}",
                        rate,
                        r.achieved,
                        p.p95,
                        l.p95,
                        r.peak_rss_kib.unwrap_or(0) as f64 / 1024.0,
                        r.failure(bound).map(|f| format!("  [fails {bound} ms: {f}]")).unwrap_or_default()
                    );
                    let pass = r.failure(bound).is_none();
                    probes.push(r);
                    pass
                }
            };
            s.record(rate, pass);
        }
        let cap = s.capacity();
        println!(
            "=> highest rate with pull p95 <= {bound} ms: {}{}",
            cap.map_or("none (no probe passed)".into(), |c| format!(
                "{} events/s",
                thousands(c)
            )),
            if cap == Some(opts.max_rate) {
                " (the search bound)"
            } else {
                ""
            }
        );
        found.push(
            json!({"bound_ms": bound, "rate": cap, "at_search_bound": cap == Some(opts.max_rate)}),
        );
        if let Some(c) = cap {
            start = c;
        }
    }
    // Charts of the fastest run that kept the 100 ms bound (else the first probe).
    let best = probes
        .iter()
        .filter(|p| p.failure(100.0).is_none())
        .max_by_key(|p| p.rate)
        .or(probes.first());
    let charts = match best {
        Some(b) => charts(out, b, opts)?,
        None => Value::Null,
    };
    out.write_json(&json!({
        "benchmark": "rockbench", "mode": "search", "options": options_json(opts),
        "capacity": found, "probes": probes.iter().map(RunResult::to_json).collect::<Vec<_>>(),
        "charts": charts,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_about_a_kilobyte_with_nesting() {
        let mut rng = StdRng::seed_from_u64(1);
        let sizes: Vec<usize> = (0..500)
            .map(|k| {
                event(&mut rng, 3, k, 1_700_000_000_000_000, false)
                    .to_string()
                    .len()
            })
            .collect();
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        assert!((700.0..1400.0).contains(&mean), "mean {mean}");
        let e = event(&mut rng, 3, 7, 42, false);
        assert_eq!((e["gen"].as_u64(), e["ts"].as_u64()), (Some(3), Some(42)));
        assert!(e["user"]["address"]["geo"]["lat"].is_f64());
        assert!(!e["friends"].as_array().unwrap().is_empty());
    }

    /// The generator writes text directly: every event of both kinds must be valid JSON of the
    /// documented shape, with floats that read back as floats.
    #[test]
    fn event_text_is_valid_json_of_the_event_shape() {
        let mut rng = StdRng::seed_from_u64(9);
        for k in 0..2_000 {
            let sparse = k % 3 == 0;
            let mut text = String::new();
            event_text(&mut rng, 1, k, 5, sparse, &mut text);
            let e: Value =
                serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}: {text}"));
            assert_eq!(
                (e["gen"].as_u64(), e["n"].as_u64(), e["ts"].as_u64()),
                (Some(1), Some(k), Some(5))
            );
            assert!(e["score"].is_f64() && e["user"]["age"].is_u64() && e["active"].is_boolean());
            assert!(e["text"]
                .as_str()
                .is_some_and(|t| t.split(' ').count() >= 50));
            if !sparse {
                assert!(e["user"]["address"]["geo"]["lon"].is_f64());
                assert!(e["user"]["address"]["zip"]
                    .as_str()
                    .is_some_and(|z| z.len() == 5));
                assert!(e["count"].is_u64());
            }
        }
    }

    #[test]
    fn meaningless_options_are_refused() {
        let ok = RockOptions {
            rate: 100,
            secs: 1,
            shape: vec![100.0],
            overwrite: 0.0,
            sparse: 0.0,
            generators: 1,
            via: Via::Ws,
            batch_ms: 10,
            pull_ms: 100,
            reader: Reader::Sorted,
            exempt: vec![],
            durability: Durability::NoSync,
            cache_mib: None,
            search: false,
            max_rate: 1000,
            bisect_steps: 1,
            seed: 1,
            out: None,
        };
        assert!(validate(&ok).is_ok());
        let bad = [
            RockOptions {
                overwrite: 1.5,
                ..ok.clone()
            },
            RockOptions {
                sparse: -0.1,
                ..ok.clone()
            },
            RockOptions {
                rate: 0,
                ..ok.clone()
            },
            RockOptions {
                generators: 0,
                ..ok.clone()
            },
            RockOptions {
                shape: vec![0.0, 0.0],
                ..ok.clone()
            },
            RockOptions {
                shape: vec![50.0, -1.0],
                ..ok.clone()
            },
            RockOptions {
                search: true,
                max_rate: 10,
                ..ok.clone()
            },
        ];
        for b in bad {
            assert!(validate(&b).is_err(), "{b:?}");
        }
    }

    #[test]
    fn sparse_events_drop_and_retype_fields() {
        let mut rng = StdRng::seed_from_u64(2);
        let e = event(&mut rng, 0, 0, 1, true);
        assert!(e.get("friends").is_none() && e["user"].get("address").is_none());
        assert!(e["count"].is_string());
        assert!(e
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.starts_with("attr_")));
        assert!(e["ts"].is_u64(), "the event time never changes type");
    }

    /// The pull evaluator must stay cheap as the collection grows: its query walks the `ts`
    /// index from the end instead of scanning.
    #[test]
    fn the_newest_event_query_uses_the_ts_index() {
        let dir = tempfile::tempdir().unwrap();
        let opts = herald_db::DbOptions {
            durability: Durability::NoSync,
            ..Default::default()
        };
        let db = herald_db::Db::open(dir.path(), opts).unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let writes = (0..50)
            .map(|k| herald_db::Write::Put {
                collection: COLLECTION.into(),
                id: format!("e{k}"),
                doc: event(&mut rng, 0, k, 1000 + k, k % 7 == 0),
                if_version: None,
            })
            .collect();
        db.commit(writes).unwrap();
        let q = newest_query(Reader::Sorted);
        let parts = herald_protocol::QueryParts {
            filter: q.get("filter").cloned(),
            sort: q.get("sort").cloned(),
            skip: q.get("skip").cloned(),
            limit: q.get("limit").cloned(),
            projection: q.get("projection").cloned(),
            ..Default::default()
        };
        let query = herald::api::query::query_of(&parts).unwrap();
        let out = db.query(COLLECTION, &query).unwrap();
        assert_eq!(out.docs[0]["ts"], 1049);
        assert_eq!(
            out.explain.plan.kind(),
            "ordered_index",
            "{:?}",
            out.explain
        );
        assert_eq!(out.explain.docs_examined, 1);
    }

    #[test]
    fn latency_is_measured_on_the_monotonic_clock() {
        let start = Instant::now();
        let c = Clock {
            start,
            start_epoch_us: 1_000_000,
        };
        assert_eq!(c.ts_of(0.5), 1_500_000);
        assert_eq!(
            c.latency_us(1_000_000, start + Duration::from_millis(20)),
            20_000
        );
        assert_eq!(c.latency_us(2_000_000, start), 1, "never zero or negative");
    }
}
