//! Herald query core (being written).
