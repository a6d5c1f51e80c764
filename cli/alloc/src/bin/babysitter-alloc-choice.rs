//! Prints the allocator this process got (`system` or `mimalloc`) for its arguments and
//! environment: the crate's black-box test starts it the way a shell starts `babysitter`.

#[global_allocator]
static ALLOC: babysitter_cli_alloc::Chosen = babysitter_cli_alloc::Chosen;

fn main() {
    let choice = if babysitter_cli_alloc::system_in_use() {
        "system"
    } else {
        "mimalloc"
    };
    // A few allocations and frees go through it before the answer.
    let words: Vec<String> = std::env::args().map(|a| a.to_uppercase()).collect();
    std::hint::black_box(words);
    println!("{choice}");
}
