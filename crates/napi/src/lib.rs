//! Node-API binding. Converts JS values to core types and core errors to JS errors; no rules live here.
