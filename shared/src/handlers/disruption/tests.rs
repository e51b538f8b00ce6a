//! Tests of the disruption handler.
