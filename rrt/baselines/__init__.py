"""The paper's comparison systems that are models: Seq2seq and Seq2seq Copy, CTRL and PPLM."""
