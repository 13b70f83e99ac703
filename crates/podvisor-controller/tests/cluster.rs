//! Tests against a real cluster: see README "In a cluster".
