pub fn _todo() {}
