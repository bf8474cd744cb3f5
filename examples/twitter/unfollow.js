// Unfollow: removes the unfollowed user's tweets from the follower's timeline. Installed as a
// trigger on deletes from `follows`; `event.before` is the deleted follow.
function (event, db) {
  const f = event.before;
  const timeline = "timelines/" + f.follower + "/entries";
  for (const entry of db.query({ collection: timeline, filter: { by: f.followee } })) {
    db.delete(timeline, entry._id);
  }
}
