//! Smoke tests of the Kafka the cluster mode runs on, against a real broker: topics, an
//! idempotent acks=all producer, a consumer reading it back, and consumer-group failover after a
//! member dies without leaving (the mechanism leadership rests on). They fail if the broker does
//! not work.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use herald_cluster::testing::{unique_name, KafkaCluster};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, RebalanceProtocol};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

/// Set in the child process `group_failover` spawns: `<bootstrap> <topic> <group>`.
const CHILD_ENV: &str = "HERALD_TEST_GROUP_CHILD";

/// Held by the tests whose timings matter and by the one that starts three brokers (three JVMs
/// starting take both cores here for several seconds): they never overlap.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(future)
}

/// Creates a one-partition topic replicated on every broker (up to 3), so acks=all meets
/// min.insync.replicas on a shared cluster of any size.
fn create_topic(kafka: &KafkaCluster, topic: &str) {
    let replicas = kafka.brokers().min(3) as i32;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka.bootstrap())
        .create()
        .expect("admin client");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = block_on(admin.create_topics(
        &[NewTopic::new(topic, 1, TopicReplication::Fixed(replicas))],
        &options,
    ))
    .expect("create_topics request");
    for result in results {
        result.unwrap_or_else(|(name, code)| panic!("creating topic {name}: {code}"));
    }
}

fn producer(bootstrap: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "10000")
        .create()
        .expect("producer")
}

/// A group member with the settings leadership uses: failover within the session timeout, and a
/// sticky assignment so a member joining does not take the partition from its holder.
fn group_member(bootstrap: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("session.timeout.ms", "3000")
        .set("heartbeat.interval.ms", "500")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer")
}

fn holds_partition(consumer: &BaseConsumer) -> bool {
    consumer
        .assignment()
        .map(|a| a.count() > 0)
        .unwrap_or(false)
}

#[test]
fn produce_idempotent_acks_all_and_read_back() {
    let kafka = KafkaCluster::shared();
    let topic = unique_name("smoke");
    create_topic(kafka, &topic);

    let producer = producer(kafka.bootstrap());
    let sent: Vec<String> = (0..100).map(|i| format!("record {i}")).collect();
    block_on(async {
        for (i, payload) in sent.iter().enumerate() {
            let delivery = producer
                .send(
                    FutureRecord::to(&topic).key(&[]).payload(payload),
                    Duration::from_secs(10),
                )
                .await
                .unwrap_or_else(|(e, _)| panic!("producing record {i}: {e}"));
            assert_eq!(delivery.offset, i as i64, "offsets are dense and in order");
        }
    });

    // librdkafka wants a group.id even for a consumer that only assigns partitions itself.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka.bootstrap())
        .set("group.id", unique_name("smoke-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).expect("assign");
    let mut received = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while received.len() < sent.len() {
        assert!(Instant::now() < deadline, "read back only {received:?}");
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("consume");
            received.push(String::from_utf8(message.payload().unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(received, sent);
}

/// Not a test of its own: the group member `group_failover_after_a_member_is_killed` runs in a
/// child process (this binary with `--ignored --exact group_member_child`) so it can die by
/// SIGKILL, without leaving the group. It reports each change of its assignment on stdout.
#[test]
#[ignore = "the child process of group_failover_after_a_member_is_killed"]
fn group_member_child() {
    let Ok(args) = std::env::var(CHILD_ENV) else {
        return;
    };
    let args: Vec<&str> = args.split(' ').collect();
    let consumer = group_member(args[0], args[2]);
    consumer.subscribe(&[args[1]]).expect("subscribe");
    let mut held = None;
    loop {
        let _ = consumer.poll(Duration::from_millis(100));
        let holds = holds_partition(&consumer);
        if held != Some(holds) {
            println!("HERALD_CHILD holds={holds}");
            held = Some(holds);
        }
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn group_failover_after_a_member_is_killed() {
    let _heavy = heavy();
    let kafka = KafkaCluster::shared();
    let topic = unique_name("failover");
    let group = unique_name("failover-group");
    create_topic(kafka, &topic);

    // Member A: a child process running `group_member_child`.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "group_member_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{} {topic} {group}", kafka.bootstrap()))
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the group member child");
    let stdout = child.stdout.take().unwrap();
    let mut child = KillOnDrop(child);
    let (lines, child_says) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may print "test group_member_child ... " on the same line first.
            if let Some((_, state)) = line.split_once("HERALD_CHILD ") {
                if lines.send(state.to_string()).is_err() {
                    break;
                }
            }
        }
    });
    let wait_child = |want: &str| loop {
        match child_says.recv_timeout(Duration::from_secs(60)) {
            Ok(state) if state == want => break,
            Ok(_) => continue,
            Err(e) => panic!("the child member never reported {want}: {e}"),
        }
    };
    wait_child("holds=true");

    // Member B joins and, the assignment being sticky, stands by with nothing.
    let standby = group_member(kafka.bootstrap(), &group);
    standby.subscribe(&[topic.as_str()]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(30);
    while matches!(standby.rebalance_protocol(), RebalanceProtocol::None) {
        assert!(Instant::now() < deadline, "member B never joined the group");
        let _ = standby.poll(Duration::from_millis(100));
    }
    // Let the rebalance B's join caused finish, then check A kept the partition.
    let settle = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settle {
        let _ = standby.poll(Duration::from_millis(100));
    }
    assert!(
        !holds_partition(&standby),
        "the sticky assignment moved the partition to the joining member"
    );
    assert!(
        child_says.try_iter().all(|state| state == "holds=true"),
        "the child lost the partition when B joined"
    );

    // A dies without leaving the group; B must get the partition once A's session expires.
    let killed_at = Instant::now();
    child.0.kill().expect("SIGKILL the child member");
    child.0.wait().unwrap();
    while !holds_partition(&standby) {
        assert!(
            killed_at.elapsed() < Duration::from_secs(20),
            "member B did not get the partition within 20 s of A's death"
        );
        let _ = standby.poll(Duration::from_millis(50));
    }
    let failover = killed_at.elapsed();
    println!(
        "consumer-group failover after SIGKILL: {} ms (session.timeout.ms=3000, heartbeat.interval.ms=500)",
        failover.as_millis()
    );
    assert!(
        failover >= Duration::from_secs(2),
        "B got the partition before A's session could expire ({failover:?}): was A really a member?"
    );

    // B really consumes it: a record produced now reaches B.
    block_on(async {
        producer(kafka.bootstrap())
            .send(
                FutureRecord::to(&topic).key(&[]).payload("after failover"),
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("producing after failover: {e}"));
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            Instant::now() < deadline,
            "B received nothing after the failover"
        );
        if let Some(message) = standby.poll(Duration::from_millis(200)) {
            let message = message.expect("consume");
            if message.payload() == Some(b"after failover".as_slice()) {
                break;
            }
        }
    }
}

#[test]
fn three_brokers_survive_a_killed_broker() {
    let _heavy = heavy();
    // A fault-test cluster of its own: acks=all with min.insync.replicas=2 keeps working with one
    // broker down, and the restarted broker rejoins.
    let kafka = KafkaCluster::start(3);
    assert_eq!(kafka.bootstrap().split(',').count(), 3);
    let topic = unique_name("replicated");
    create_topic(&kafka, &topic);
    let producer = producer(kafka.bootstrap());
    let send = |payload: &str| {
        block_on(producer.send(
            FutureRecord::to(&topic).key(&[]).payload(payload),
            Duration::from_secs(20),
        ))
        .unwrap_or_else(|(e, _)| panic!("producing {payload}: {e}"))
    };
    send("before");
    kafka.kill_broker(0);
    let started = Instant::now();
    send("with broker 0 dead");
    println!(
        "acks=all write with one of 3 brokers SIGKILLed: {} ms",
        started.elapsed().as_millis()
    );
    kafka.restart_broker(0);
    send("after restart");
}
