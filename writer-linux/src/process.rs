//! Process context (OTEP 4719): publish, update, unpublish.
