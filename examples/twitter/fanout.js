// Fan-out on write: copies each new tweet into the timeline of every follower of its author and
// counts the author's tweets. Installed as a trigger on inserts into `tweets`.
function (event, db) {
  const tweet = event.after;
  const followers = db.query({ collection: "follows", filter: { followee: tweet.by } });
  for (const f of followers) {
    db.put("timelines/" + f.follower + "/entries", event.id, {
      by: tweet.by,
      text: tweet.text,
      at: tweet.at,
    });
  }
  db.update("users", tweet.by, { $inc: { tweets: 1 } });
}
