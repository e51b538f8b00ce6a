//! In-memory adapters (filled next).
