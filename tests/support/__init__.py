"""What the tests share: polling (`eventually`), fakes of the pass's seams, builders."""
