//! Xirang's switch reader: SONiC `config_db.json`.

pub mod sonic;
