"""The ledger of trained drafts: protocols, their records, the runs that train owed units, the tables and the evidence file made from the records."""
