//! The fan-out workload: the power-law follower graph, its bulk load into `follows`, the tweets
//! the posters send, the marker a finished fan-out writes, and the trigger function.
//!
//! Accounts are `u0 .. u{P-1}` with `P = max(users, followers_max + 1)`; only `u0 .. u{users-1}`
//! post. Poster `i` has `max(1, floor(followers_max / (i + 1)))` followers (a power law: `u0`
//! is followed by `followers_max` accounts, most posters by a handful), drawn without
//! replacement from the other accounts with a seeded generator, so every run loads the same
//! graph.

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// The collection of follow edges `{follower, followee}`.
pub const FOLLOWS: &str = "follows";
/// The collection of tweets the posters insert.
pub const TWEETS: &str = "tweets";
/// The collection of markers, one per finished fan-out (written last).
pub const MARKERS: &str = "fanout_done";
/// Characters of tweet text (a tweet document is about 200 bytes, as in the paper).
pub const TEXT_CHARS: usize = 140;
/// NDJSON lines per `/v1/bulk` request when loading the graph.
const BULK_CHUNK: usize = 20_000;

/// The follower graph: for each poster, the accounts that follow it.
pub struct Graph {
    pub users: usize,
    pub accounts: usize,
    pub followers: Vec<Vec<u32>>,
}

/// Followers of poster `i` under the power law.
pub fn follower_count(i: usize, followers_max: usize, accounts: usize) -> usize {
    (followers_max / (i + 1)).clamp(1, accounts.saturating_sub(1).max(1))
}

pub fn account(i: u32) -> String {
    format!("u{i}")
}

impl Graph {
    pub fn generate(users: usize, followers_max: usize, seed: u64) -> Graph {
        let accounts = users.max(followers_max + 1).max(2);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let followers = (0..users)
            .map(|i| {
                let n = follower_count(i, followers_max, accounts);
                // Sample from the accounts other than `i`: indexes >= i shift up by one.
                rand::seq::index::sample(&mut rng, accounts - 1, n)
                    .into_iter()
                    .map(|a| if a >= i { a as u32 + 1 } else { a as u32 })
                    .collect()
            })
            .collect();
        Graph {
            users,
            accounts,
            followers,
        }
    }

    pub fn edges(&self) -> usize {
        self.followers.iter().map(Vec::len).sum()
    }

    /// Mean followers of a tweet's author when authors are uniform: the mean fan-out.
    pub fn mean_fanout(&self) -> f64 {
        self.edges() as f64 / self.users.max(1) as f64
    }

    /// The NDJSON bodies that put every follow edge (ids `follower-followee`).
    pub fn bulk_bodies(&self) -> Vec<String> {
        let mut bodies = Vec::new();
        let mut body = String::new();
        let mut lines = 0;
        for (i, fs) in self.followers.iter().enumerate() {
            let followee = account(i as u32);
            for &f in fs {
                let follower = account(f);
                let line = json!({"op": "put", "collection": FOLLOWS, "id": format!("{follower}-{followee}"),
                                  "doc": {"follower": follower, "followee": followee}});
                body.push_str(&line.to_string());
                body.push('\n');
                lines += 1;
                if lines == BULK_CHUNK {
                    bodies.push(std::mem::take(&mut body));
                    lines = 0;
                }
            }
        }
        if lines > 0 {
            bodies.push(body);
        }
        bodies
    }

    /// Loads the graph through `/v1/bulk`.
    pub async fn load(&self, http: &reqwest::Client, base: &str) -> Result<(), String> {
        for body in self.bulk_bodies() {
            bulk(http, base, body).await?;
        }
        Ok(())
    }

    /// The timeline entries of `tweets` earlier tweets by random posters, as NDJSON bodies of
    /// at most [`BULK_CHUNK`] lines, made one at a time by the returned iterator.
    pub fn history(&self, tweets: u64, seed: u64) -> impl Iterator<Item = String> + '_ {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut entries = (0..tweets).flat_map(move |j| {
            let author = rng.gen_range(0..self.users) as u32;
            let t = Tweet::new(format!("pre-{j}"), author, "pre".into(), &mut rng);
            let entry = t.entry();
            self.followers[author as usize].iter().map(move |&f| {
                json!({"op": "put", "collection": timeline(&account(f)), "id": t.id, "doc": entry})
            })
        });
        std::iter::from_fn(move || {
            let mut body = String::new();
            for line in entries.by_ref().take(BULK_CHUNK) {
                body.push_str(&line.to_string());
                body.push('\n');
            }
            (!body.is_empty()).then_some(body)
        })
    }

    /// Bulk-loads [`Graph::history`]: the timelines start with data in them, so the phases
    /// measure a database past its first, cheapest inserts. Returns the entries loaded.
    pub async fn preload(
        &self,
        http: &reqwest::Client,
        base: &str,
        tweets: u64,
        seed: u64,
    ) -> Result<u64, String> {
        let mut n = 0;
        for body in self.history(tweets, seed) {
            n += bulk(http, base, body).await?;
        }
        Ok(n)
    }
}

/// Posts one NDJSON body to `/v1/bulk`; every line must apply. Returns the lines applied.
async fn bulk(http: &reqwest::Client, base: &str, body: String) -> Result<u64, String> {
    let resp: Value = http
        .post(format!("{base}/v1/bulk"))
        .body(body)
        .send()
        .await
        .map_err(|e| format!("bulk load: {e}"))?
        .json()
        .await
        .map_err(|e| format!("bulk load: {e}"))?;
    match (resp["failed"].as_u64(), resp["applied"].as_u64()) {
        (Some(0), Some(applied)) => Ok(applied),
        _ => Err(format!("bulk load failed: {resp}")),
    }
}

/// One tweet: what a poster inserts and what a fan-out job carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Tweet {
    /// `{run}-{k}`: the tweet's id, its timeline entries' id and its marker's id.
    pub id: String,
    pub by: String,
    pub text: String,
    pub ts: u64,
    /// The marker's `run` (the watcher's subscription bucket).
    pub run: String,
}

impl Tweet {
    pub fn new(id: String, author: u32, run: String, rng: &mut impl Rng) -> Tweet {
        let text = (0..TEXT_CHARS)
            .map(|i| {
                if i % 7 == 6 {
                    ' '
                } else {
                    char::from(b'a' + rng.gen_range(0..26))
                }
            })
            .collect();
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Tweet {
            id,
            by: account(author),
            text,
            ts,
            run,
        }
    }

    /// The tweet document (also the queue job: it carries everything the fan-out needs).
    pub fn doc(&self) -> Value {
        json!({"_id": self.id, "by": self.by, "text": self.text, "ts": self.ts, "run": self.run})
    }

    pub fn from_doc(v: &Value) -> Option<Tweet> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(Tweet {
            id: s("_id")?,
            by: s("by")?,
            text: s("text")?,
            ts: v.get("ts")?.as_u64()?,
            run: s("run")?,
        })
    }

    /// A follower's timeline entry for this tweet.
    pub fn entry(&self) -> Value {
        json!({"by": self.by, "text": self.text, "ts": self.ts})
    }

    /// The marker written last by a finished fan-out to `followers` timelines.
    pub fn marker(&self, followers: usize) -> Value {
        json!({"run": self.run, "tweet": self.id, "by": self.by, "followers": followers})
    }
}

/// The collection of one account's timeline entries.
pub fn timeline(follower: &str) -> String {
    format!("timelines/{follower}/entries")
}

/// The trigger function of the integrated mode: the same fan-out as the client's and the
/// worker's, as one task (all entries and the marker commit atomically with the dequeue).
pub const TRIGGER_FUNCTION: &str = r#"function (event, db) {
    const t = event.after;
    const fs = db.query({collection: "follows", filter: {followee: t.by}});
    for (const f of fs) {
        db.put("timelines/" + f.follower + "/entries", event.id, {by: t.by, text: t.text, ts: t.ts});
    }
    db.put("fanout_done", event.id, {run: t.run, tweet: event.id, by: t.by, followers: fs.length});
}"#;

/// The trigger definition for `PUT /v1/triggers/fanout`.
pub fn trigger_def() -> Value {
    json!({"collection": TWEETS, "on": ["insert"], "function": TRIGGER_FUNCTION})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follower_counts_follow_the_power_law() {
        let g = Graph::generate(1000, 5000, 7);
        assert_eq!(g.accounts, 5001);
        assert_eq!(g.followers[0].len(), 5000);
        assert_eq!(g.followers[1].len(), 2500);
        assert_eq!(g.followers[9].len(), 500);
        assert_eq!(g.followers[999].len(), 5);
        // Sum of floor(5000 / i) for i = 1..=1000: about 5000 * (ln 1000 + 0.58).
        assert!((36_000..39_000).contains(&g.edges()), "{}", g.edges());
        assert!((36.0..39.0).contains(&g.mean_fanout()));
    }

    #[test]
    fn followers_are_distinct_other_accounts_and_deterministic() {
        let g = Graph::generate(50, 40, 1);
        for (i, fs) in g.followers.iter().enumerate() {
            let set: std::collections::HashSet<_> = fs.iter().collect();
            assert_eq!(set.len(), fs.len(), "duplicates for u{i}");
            assert!(fs
                .iter()
                .all(|&f| f as usize != i && (f as usize) < g.accounts));
        }
        // Everyone has at least one follower, even past followers_max.
        assert!(g.followers.iter().all(|fs| !fs.is_empty()));
        assert_eq!(Graph::generate(50, 40, 1).followers, g.followers);
    }

    #[test]
    fn bulk_bodies_hold_every_edge_once() {
        let g = Graph::generate(300, 30_000, 3);
        let bodies = g.bulk_bodies();
        assert!(bodies.len() > 1);
        let lines: usize = bodies.iter().map(|b| b.lines().count()).sum();
        assert_eq!(lines, g.edges());
    }

    #[test]
    fn history_puts_one_entry_per_follower_of_each_tweet() {
        let g = Graph::generate(300, 30_000, 3);
        let bodies: Vec<String> = g.history(50, 9).collect();
        let lines: Vec<Value> = bodies
            .iter()
            .flat_map(|b| b.lines().map(|l| serde_json::from_str(l).unwrap()))
            .collect();
        assert!(bodies.iter().all(|b| b.lines().count() <= BULK_CHUNK));
        let tweets: std::collections::HashSet<&str> =
            lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
        assert!(tweets.len() <= 50 && tweets.contains("pre-0"));
        assert!(lines
            .iter()
            .all(|l| l["collection"].as_str().unwrap().starts_with("timelines/")));
        assert_eq!(g.history(0, 9).count(), 0);
    }

    #[test]
    fn tweet_round_trips_through_its_document() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let t = Tweet::new("r-1".into(), 3, "r-b0".into(), &mut rng);
        assert_eq!(t.text.len(), TEXT_CHARS);
        assert_eq!(Tweet::from_doc(&t.doc()), Some(t.clone()));
        assert_eq!(t.marker(4)["followers"], 4);
    }
}
